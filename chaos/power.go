package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/lazyfs"
	"github.com/raftlock/raftlock/checker/history"
)

// The power families: SIGKILL keeps the page cache, so a member killed
// loses nothing it wrote, synced or not; a power cut loses what no fsync
// made durable. With power or power-all each member's data directory is
// a lazyfs mount over a backing directory beside it, which forgets its
// unsynced writes on a cut.

// powerFamilies are the families that need the members' data on lazyfs.
var powerFamilies = []fault.Family{fault.FamilyPower, fault.FamilyPowerAll}

// usesPower says whether the run carries out a power family: then every
// member's data directory (a peer target's servers': peerpower.go) is
// mounted on lazyfs.
func (c *Config) usesPower() bool {
	run, _ := c.nemeses()
	return slices.ContainsFunc(run, func(f fault.Family) bool {
		return slices.Contains(powerFamilies, f)
	})
}

// checkPower refuses a run with power families on a machine where it
// cannot mount lazyfs (not root, or no /dev/fuse): the families are
// never skipped in silence.
func (c *Config) checkPower() error {
	if !c.usesPower() {
		return nil
	}
	if err := lazyfs.Available(); err != nil {
		return fmt.Errorf("--nemesis power and power-all need root and /dev/fuse for the members' lazyfs mounts: %w", err)
	}
	return nil
}

// PowerCounts are the power families' cuts of members' disks and the
// unsynced bytes they dropped, for the verdict's stats.
type PowerCounts struct {
	Cuts         int
	BytesDropped int64
}

// powerDisks are the members' lazyfs mounts, by member id.
type powerDisks struct {
	log   *slog.Logger
	mu    sync.Mutex
	disks map[int]*lazyfs.FS
}

// mountPower cleans what a harness that died left in lazyfs's state
// directory, then mounts each of ids' data directory (sup's DataDir) on
// lazyfs over a backing directory beside it (dataDir names a member's
// data directory: the supervisor's DataDir). On an error it unmounts what
// it mounted.
func mountPower(ctx context.Context, dataDir func(id int) string, ids []int, seed uint64, log *slog.Logger) (*powerDisks, error) {
	if err := lazyfs.Available(); err != nil {
		return nil, err
	}
	if cleaned, err := lazyfs.CleanStale(""); err != nil {
		return nil, fmt.Errorf("clean the mounts a dead harness left: %w", err)
	} else if len(cleaned) > 0 {
		log.Warn("unmounted lazyfs mounts a dead harness left", "mountpoints", cleaned)
	}
	p := &powerDisks{log: log, disks: map[int]*lazyfs.FS{}}
	for _, id := range ids {
		mp := dataDir(id)
		backing := mp + ".backing"
		for _, d := range []string{backing, mp} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				p.unmount()
				return nil, fmt.Errorf("mount the data of node %d: %w", id, err)
			}
		}
		// Each member's own seed, so that two torn cuts of two members
		// at once tear their files differently.
		fs, err := lazyfs.Mount(ctx, backing, mp, lazyfs.Options{Seed: seed ^ uint64(id)<<32, Logger: log})
		if err != nil {
			p.unmount()
			return nil, fmt.Errorf("mount the data of node %d: %w", id, err)
		}
		p.disks[id] = fs
	}
	return p, nil
}

// cut cuts member id's power at its disk: the member must be dead.
func (p *powerDisks) cut(id int, torn bool) (history.PowerCut, error) {
	if p == nil {
		return history.PowerCut{}, fmt.Errorf("node %d: the run has no lazyfs mounts", id)
	}
	p.mu.Lock()
	fs := p.disks[id]
	p.mu.Unlock()
	if fs == nil {
		return history.PowerCut{}, fmt.Errorf("node %d: its data is on no lazyfs mount", id)
	}
	mode := lazyfs.CutDropAll
	if torn {
		mode = lazyfs.CutTorn
	}
	rep, err := fs.Cut(mode)
	return history.PowerCut{Mode: rep.Mode.String(), Files: rep.Files, BytesDropped: rep.BytesDropped,
		BytesKept: rep.BytesKept, EntriesUndone: rep.EntriesUndone}, err
}

// unmount unmounts every mount, keeping what is on them: the members
// must be dead. A nil p has none.
func (p *powerDisks) unmount() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for id, fs := range p.disks {
		if err := fs.Unmount(); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
			continue
		}
		delete(p.disks, id)
	}
	return errors.Join(errs...)
}

// power carries out a power failure: SIGKILL the members (at once: the
// coordinated failure is a moment, not a sequence), cut each one's disk,
// and record what each cut dropped; its heal starts them again.
func (n *Nemesis) power(ctx context.Context, p fault.Power) (func(context.Context), string) {
	p.Record(n.Rec)
	// Read the counters that die with the processes, then kill them all.
	for _, id := range p.Nodes {
		if n.Sup.Running(id) && !n.Sup.Paused(id) {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			n.Sup.Metrics(cctx, id)
			cancel()
		}
	}
	var wg sync.WaitGroup
	for _, id := range p.Nodes {
		wg.Go(func() { n.Sup.kill(id) })
	}
	wg.Wait()
	var dropped int64
	for i, id := range p.Nodes {
		c, err := n.Power.cut(id, p.Torn[i])
		if err != nil {
			// A cut that could not remount leaves the member an empty
			// directory to restart on: the run ends with no verdict
			// (collect), never with one on a disk it did not describe.
			n.Counts.PowerCutsFailed.Add(1)
			n.Log.Error("power cut failed", "node", id, "err", err)
			continue
		}
		fault.PowerCut{Node: id, Cut: c}.Record(n.Rec)
		n.Counts.PowerCuts.Add(1)
		n.Counts.PowerBytesDropped.Add(c.BytesDropped)
		dropped += c.BytesDropped
	}
	return n.restart(p.Nodes), fmt.Sprintf("power cut %v (%d unsynced bytes dropped)", p.Nodes, dropped)
}

// powerOne is the power family's fault; its two kinds take turns, the
// aimed one first (a short run may have room for few): a follower's
// power cut right after it installed a snapshot (powerAfterInstall), and
// a power cut of a member drawn at any moment, the leader one time in
// three (fault.DrawPower).
func (n *Nemesis) powerOne(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	n.powerFaults++
	if n.powerFaults%2 == 1 {
		return n.powerAfterInstall(ctx, rng)
	}
	return n.power(ctx, fault.DrawPower(rng, view{ctx, n.Sup}, false))
}

// powerAfterInstall cuts a follower's power right after it installed a
// snapshot from the leader and acknowledged it, before it stored
// anything else. Raft's MustSync ignores snapshots, and a member's next
// synced write (the entries that follow the install, a few milliseconds
// later) makes an unsynced install durable with it, so a cut at a drawn
// moment all but never lands in between. So: the follower is cut off
// until the leader compacted past it (only a snapshot brings it back);
// every link into it is armed to drop its messages once a snapshot
// stream starts (Proxy.HoldAfterSnapshot: the appends and heartbeats
// after the install, recorded as a one-way partition into it); the
// partition heals; and once the follower says it installed (or the bound
// passed), it is killed and its disk cut, whole (a torn cut may keep
// what the cut is for). A follower that acknowledged the snapshot without
// syncing it comes back without it, and the leader's next heartbeat
// commits past its log (member-crashes: lost entries it had
// acknowledged). Its heal restarts the follower.
func (n *Nemesis) powerAfterInstall(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	f, _ := n.isolatePastLeader(ctx, rng)
	before, err := n.Sup.Metrics(ctx, f)
	var into [][2]int
	for _, id := range n.Sup.IDs() {
		if id != f {
			into = append(into, [2]int{id, f})
		}
	}
	n.Sup.HoldAfterSnapshot(f, true)
	n.Sup.Heal()
	fault.Heal{}.Record(n.Rec)
	fault.OneWay{Links: into}.Record(n.Rec)
	n.setCurrent("cut %d's power after its snapshot install", f)
	if err == nil && n.watch(ctx, f, snapshotWait, 5*time.Millisecond, func(_, now MemberMetrics) bool {
		return now.Installed > before.Installed
	}) {
		n.Counts.PowerAfterInstall.Add(1)
	}
	restart, desc := n.power(ctx, fault.Power{Nodes: []int{f}, Torn: []bool{false}})
	n.Sup.HoldAfterSnapshot(f, false)
	fault.Heal{Links: into}.Record(n.Rec)
	return restart, desc + " after its snapshot install"
}

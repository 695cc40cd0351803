package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker/history"
)

// Families are the nemesis families, in the order --nemesis documents them.
var Families = []fault.Family{fault.FamilyKill, fault.FamilyPause, fault.FamilyPartition, fault.FamilyClock, fault.FamilyNet, fault.FamilySnapshot, fault.FamilyGarbage}

// OptInFamilies are families a run has only when --nemesis names them:
// garbage-heartbeat sends the forged frame that once stopped every member
// without TLS (a heartbeat with a commit index past the log, see
// garbageKinds; members now refuse it), so a run shows it is refused. garbage itself is a
// default family: eight 30 s runs with it (seeds 11, 21-24, 101-103)
// stayed valid with no member crashed and took 32-36 s, as without it.
//
// membership replaces a member (remove one, add a new one that catches up
// by snapshot); it is opt-in so the default suite's mix of faults stays as
// measured, and CI runs it on its own (.ci/run).
//
// power and power-all cut members' power (power.go): they need root and
// /dev/fuse for their lazyfs mounts, which not every machine running the
// default suite has.
//
// corrupt damages a stopped member's data file (corrupt.go): a member
// that refuses its data is replaced, as membership replaces one, so the
// run has membership changes the default suite's mix was not measured
// with; like membership, it is opt-in and CI runs it on its own.
var OptInFamilies = []fault.Family{fault.FamilyGarbageHeartbeat, fault.FamilyMembership, fault.FamilyPower, fault.FamilyPowerAll, fault.FamilyCorrupt}

// ClientFamilies are families that stop workload client processes: a run
// has them only when --nemesis names them, and carries them out only with
// --client-procs (else the header and summary.md name them as not run).
var ClientFamilies = []fault.Family{fault.FamilyClientPause}

// optIn is every family a run has only when --nemesis names it.
func optIn() []fault.Family {
	return append(append([]fault.Family(nil), OptInFamilies...), ClientFamilies...)
}

// The client-pause family's timing: a pause lasts at least the longest
// lease and clientPauseMargin more, so the paused holder's lease has run
// out when it continues; it waits up to clientPauseWait for the client to
// reach a critical section (a store read) before stopping it wherever it is.
const (
	clientPauseMargin = 500 * time.Millisecond
	clientPauseWait   = 3 * time.Second
)

// combinable are the families that may run two at once: each touches state
// of its own (clocks, link faults, cut links, processes, signals), so any
// two of them heal independently. snapshot drives a partition and kills of
// its own and runs alone. Two at once are injected in this order and healed
// in the reverse: a member is set its clock before it is paused, and is
// resumed before anything else is asked of it.
var combinable = []fault.Family{fault.FamilyClock, fault.FamilyNet, fault.FamilyPartition, fault.FamilyKill, fault.FamilyPause}

// Nemesis injects faults on a schedule drawn from its seed.
type Nemesis struct {
	Sup      *Supervisor
	Rec      *history.Recorder
	Families []fault.Family
	Interval time.Duration // mean quiet time between faults
	Duration time.Duration // mean fault length
	Seed     uint64
	Log      *slog.Logger
	// BigSnapshots: the table is big (chaos --held), so snapshots stream
	// in many chunks and the snapshot family cuts streams mid-transfer.
	BigSnapshots bool
	// Clients are the client processes the client-pause family stops,
	// each for ClientPauseMin at least.
	Clients        []*clientProc
	ClientPauseMin time.Duration
	// Peer, when set, carries the member faults out on a peer target
	// (--target etcd|redis) in place of Sup.
	Peer *peerFaults
	// Power are the members' lazyfs mounts the power families cut.
	Power *powerDisks
	// Corrupt is what the corrupt family damaged and how each member
	// came back (corrupt.go).
	Corrupt corruptLog

	current        atomic.Value // string: the fault in force, for the progress line
	snapshotFaults int          // snapshot faults so far; Run's goroutine only
	powerFaults    int          // power family faults so far; Run's goroutine only
	Counts         NemesisCounts
	Garbage        GarbageCounts

	mu        sync.Mutex
	newcomers []Newcomer // the membership family's added members
}

// NemesisCounts say how often the timing-sensitive faults hit their moment.
type NemesisCounts struct {
	AfterSnapshot   atomic.Int64 // kills that followed a snapshot by one poll (a few ms)
	Compacted       atomic.Int64 // isolations that lasted until the leader compacted past the follower
	DuringInstall   atomic.Int64 // kills of a healed follower before its snapshot install was seen done
	AfterInstall    atomic.Int64 // kills of a healed follower just after its install completed
	Double          atomic.Int64 // times two faults ran at once
	SnapshotTimeout atomic.Int64 // snapshot faults whose moment never came within the bound
	SnapshotCuts    atomic.Int64 // snapshot streams cut mid-transfer, the receiver up
	// The membership family's: members replaced (removed, and a new one
	// added and promoted), replacements whose newcomer installed a
	// snapshot, removed members that stopped by themselves (the rest were
	// killed after a few seconds), and membership faults that failed to
	// remove or add (the cluster refused or did not answer).
	Replaced           atomic.Int64
	ReplacedBySnapshot atomic.Int64
	RemovedStopped     atomic.Int64
	MembershipFailed   atomic.Int64
	// The client-pause family's: client processes stopped, and of them
	// those stopped in a critical section (between a read and a write).
	ClientPauses        atomic.Int64
	ClientPausesHolding atomic.Int64
	// The power families': members' disks cut, the unsynced bytes the
	// cuts dropped, and cuts that failed (the run then has no verdict).
	PowerCuts         atomic.Int64
	PowerBytesDropped atomic.Int64
	PowerCutsFailed   atomic.Int64
	// PowerAfterInstall counts the power family's cuts of a follower
	// seen to have installed a leader's snapshot just before.
	PowerAfterInstall atomic.Int64
}

// String summarises the counts for the log.
func (c *NemesisCounts) String() string {
	s := fmt.Sprintf("kills right after a snapshot %d, isolations past compaction %d, kills during an install %d, just after one %d, double faults %d, snapshot faults timed out %d",
		c.AfterSnapshot.Load(), c.Compacted.Load(), c.DuringInstall.Load(), c.AfterInstall.Load(), c.Double.Load(), c.SnapshotTimeout.Load())
	if k := c.SnapshotCuts.Load(); k > 0 {
		s += fmt.Sprintf(", snapshot streams cut mid-transfer %d", k)
	}
	if r := c.Replaced.Load() + c.MembershipFailed.Load(); r > 0 {
		s += fmt.Sprintf(", members replaced %d (by snapshot %d, removed member stopped itself %d), membership faults failed %d",
			c.Replaced.Load(), c.ReplacedBySnapshot.Load(), c.RemovedStopped.Load(), c.MembershipFailed.Load())
	}
	if k := c.PowerCuts.Load() + c.PowerCutsFailed.Load(); k > 0 {
		s += fmt.Sprintf(", power cuts %d (%d unsynced bytes dropped; %d right after a snapshot install), power cuts failed %d",
			c.PowerCuts.Load(), c.PowerBytesDropped.Load(), c.PowerAfterInstall.Load(), c.PowerCutsFailed.Load())
	}
	if k := c.ClientPauses.Load(); k > 0 {
		s += fmt.Sprintf(", client pauses %d (%d between a read and a write)", k, c.ClientPausesHolding.Load())
	}
	return s
}

// Current describes the fault in force, or "".
func (n *Nemesis) Current() string {
	s, _ := n.current.Load().(string)
	return s
}

func (n *Nemesis) setCurrent(format string, args ...any) {
	n.current.Store(fmt.Sprintf(format, args...))
}

// Run injects faults until ctx ends, healing each before the next. The
// families come in rounds (fault.Rounds), the snapshot family leading the
// first; now and then two combinable faults run at once (fault.Pair).
func (n *Nemesis) Run(ctx context.Context) {
	rng := fault.NewRand(n.Seed)
	rounds := fault.NewRounds(rng, n.Families, fault.FamilySnapshot)
	for {
		sleep(ctx, fault.Jitter(rng, n.Interval))
		if ctx.Err() != nil {
			return
		}
		families := fault.Pair(rng, rounds.Next(), n.Families, combinable)
		if len(families) == 2 {
			n.Counts.Double.Add(1)
		}
		var heals []func(context.Context)
		var what []string
		for _, f := range families {
			heal, desc := n.inject(ctx, rng, f)
			heals = append(heals, heal)
			what = append(what, desc)
			n.setCurrent("%s", strings.Join(what, " + "))
		}
		sleep(ctx, fault.Jitter(rng, n.Duration))
		// Heal even when the run is over, the last fault first: the final
		// reads need a whole cluster.
		for i := len(heals) - 1; i >= 0; i-- {
			heals[i](context.WithoutCancel(ctx))
		}
		n.setCurrent("")
		if ctx.Err() != nil {
			return
		}
	}
}

// view is the cluster as the fault package draws from it, for one draw:
// every member is a target (the supervisor restarts what it killed).
type view struct {
	ctx context.Context
	sup *Supervisor
}

func (v view) Members() []int { return v.sup.IDs() }
func (v view) Up() []int      { return v.sup.IDs() }
func (v view) Leader() int    { return v.sup.Leader(v.ctx) }

// inject draws one fault of family, carries it out and returns its heal
// and a description.
func (n *Nemesis) inject(ctx context.Context, rng *rand.Rand, family fault.Family) (func(context.Context), string) {
	if n.Peer != nil && family != fault.FamilyClientPause {
		return n.Peer.inject(ctx, rng, family)
	}
	c := view{ctx, n.Sup}
	switch family {
	case fault.FamilyKill:
		k := fault.DrawKill(rng, c)
		k.Record(n.Rec)
		for _, id := range k.Nodes {
			n.Sup.Kill(ctx, id)
		}
		return n.restart(k.Nodes), fmt.Sprintf("kill %v", k.Nodes)
	case fault.FamilyPause:
		p := fault.DrawPause(rng, c)
		p.Record(n.Rec)
		for _, id := range p.Nodes {
			n.Sup.Pause(id)
		}
		return func(context.Context) {
			for _, id := range p.Nodes {
				n.Sup.Resume(id)
			}
			fault.Resume(p).Record(n.Rec)
		}, fmt.Sprintf("pause %v", p.Nodes)
	case fault.FamilyPartition:
		cut := fault.DrawCut(rng, c)
		cut.Record(n.Rec)
		n.Sup.SetLinks(cut.Connected)
		if o, ok := cut.(fault.OneWay); ok {
			return n.healLinks, fmt.Sprintf("one-way %v", o.Links)
		}
		return n.healLinks, fmt.Sprintf("partition %v", cut.(fault.Partition).Groups)
	case fault.FamilyClock:
		return n.clock(ctx, fault.DrawClocks(rng, c))
	case fault.FamilyNet:
		return n.net(fault.DrawNet(rng, c, false))
	case fault.FamilyGarbage:
		return n.garbage(ctx, rng, fault.DrawGarbage(rng, c, family), garbageKinds)
	case fault.FamilyGarbageHeartbeat:
		return n.garbage(ctx, rng, fault.DrawGarbage(rng, c, family), garbageUnsafeKinds)
	case fault.FamilyMembership:
		return n.membership(ctx, rng)
	case fault.FamilyClientPause:
		return n.clientPause(ctx, rng)
	case fault.FamilyCorrupt:
		return n.corrupt(ctx, rng)
	case fault.FamilyPower:
		return n.powerOne(ctx, rng)
	case fault.FamilyPowerAll:
		return n.power(ctx, fault.DrawPower(rng, c, true))
	default: // snapshot: the kinds take turns, isolation first, since
		// it is the only fault that reliably makes a member install a
		// snapshot, and a short run may have room for one snapshot fault;
		// with big snapshots the stream cut comes first, for the same
		// reason: it is the fault such a run is for.
		kinds := []func(context.Context, *rand.Rand) (func(context.Context), string){n.isolatePastCompaction, n.killAfterSnapshot}
		if n.BigSnapshots {
			kinds = append(kinds[:0:0], n.cutSnapshotStream, n.isolatePastCompaction, n.killAfterSnapshot)
		}
		n.snapshotFaults++
		return kinds[(n.snapshotFaults-1)%len(kinds)](ctx, rng)
	}
}

func (n *Nemesis) healLinks(context.Context) {
	n.Sup.Heal()
	fault.Heal{}.Record(n.Rec)
}

// restart returns the heal of a kill: start the members again.
func (n *Nemesis) restart(nodes []int) func(context.Context) {
	return func(context.Context) {
		for _, id := range nodes {
			if err := n.Sup.StartNode(id); err != nil {
				n.Log.Error("restart failed", "node", id, "err", err)
			}
		}
		fault.Start{Nodes: nodes}.Record(n.Rec)
	}
}

// clock sets the clocks drawn; its heal gives them their true clock back.
func (n *Nemesis) clock(ctx context.Context, clocks []fault.Clock) (func(context.Context), string) {
	var parts []string
	for _, c := range clocks {
		if err := n.Sup.SetClock(ctx, c.Node, c.Rate, c.OffsetMS); err != nil {
			n.Log.Warn("clock fault not applied", "node", c.Node, "err", err)
			continue
		}
		c.Record(n.Rec)
		parts = append(parts, fmt.Sprintf("%d@%gx%+dms", c.Node, c.Rate, c.OffsetMS))
	}
	return func(ctx context.Context) {
		for _, c := range clocks {
			if err := n.Sup.SetClock(ctx, c.Node, 1, 0); err == nil {
				fault.TrueClock(c.Node).Record(n.Rec)
			}
		}
	}, "clock " + strings.Join(parts, " ")
}

// net slows or thins the links drawn; its end is a heal naming them.
func (n *Nemesis) net(f fault.Net) (func(context.Context), string) {
	var desc []string
	if f.Delay > 0 {
		desc = append(desc, fmt.Sprintf("delay %v±%v", f.Delay, f.Jitter))
	}
	if f.Loss > 0 {
		desc = append(desc, fmt.Sprintf("loss %g", f.Loss))
	}
	f.Record(n.Rec)
	n.Sup.SetLinkFault(f.Links, LinkFault{Delay: f.Delay, Jitter: f.Jitter, Loss: f.Loss})
	return func(context.Context) {
		n.Sup.SetLinkFault(f.Links, LinkFault{})
		fault.Heal{Links: f.Links}.Record(n.Rec)
	}, fmt.Sprintf("%s on %d links", strings.Join(desc, " + "), len(f.Links))
}

// snapshotWait bounds how long a snapshot fault waits for its moment.
const snapshotWait = 10 * time.Second

// killAfterSnapshot watches one member's snapshot counter and kills it with
// SIGKILL as soon as the counter moves: the crash lands just after the
// snapshot and the log compaction were written. If no snapshot comes within
// the bound the member is killed anyway.
func (n *Nemesis) killAfterSnapshot(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	ids := n.Sup.IDs()
	id := ids[rng.IntN(len(ids))]
	if rng.IntN(2) == 0 {
		if l := n.Sup.Leader(ctx); l != 0 {
			id = l
		}
	}
	n.setCurrent("waiting for a snapshot of %d", id)
	moved := n.watch(ctx, id, snapshotWait, 5*time.Millisecond, func(first, now MemberMetrics) bool {
		return now.Snapshots > first.Snapshots
	})
	if moved {
		n.Counts.AfterSnapshot.Add(1)
	} else {
		n.Counts.SnapshotTimeout.Add(1)
	}
	n.Sup.kill(id) // just read: no second reading before the kill
	fault.Kill{Nodes: []int{id}}.Record(n.Rec)
	return n.restart([]int{id}), fmt.Sprintf("kill %d after a snapshot", id)
}

// watch polls member id's metrics every period until done(first, latest)
// holds (true), the bound passes or ctx ends (false). A member that does
// not answer yet (restarting, paused) is polled again.
func (n *Nemesis) watch(ctx context.Context, id int, bound, period time.Duration, done func(first, now MemberMetrics) bool) bool {
	var first *MemberMetrics
	return pollUntil(ctx, bound, period, func(ctx context.Context) bool {
		rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		m, err := n.Sup.Metrics(rctx, id)
		rcancel()
		if err != nil {
			return false
		}
		if first == nil {
			first = &m
		}
		return done(*first, m)
	})
}

// pollUntil calls cond now and then every period until it holds (true),
// the bound passes or ctx ends (false).
func pollUntil(ctx context.Context, bound, period time.Duration, cond func(ctx context.Context) bool) bool {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	t := time.NewTicker(period)
	defer t.Stop()
	for !cond(ctx) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// isolatePastCompaction cuts a follower off until the leader has compacted
// its log past the follower's applied index (so only a snapshot can bring
// it back), heals, and kills the follower while the leader's snapshot is
// on its way or being installed (at a drawn moment up to 60 ms after the
// heal, or as soon as the install is seen done, whichever comes first: on
// loopback the install takes a few tens of milliseconds after the heal).
// The restart is the fault's heal.
func (n *Nemesis) isolatePastCompaction(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	killAfter := time.Duration(rng.IntN(61)) * time.Millisecond
	f, past := n.isolatePastLeader(ctx, rng)
	before, _ := n.Sup.Metrics(ctx, f)
	n.Sup.Heal()
	fault.Heal{}.Record(n.Rec)
	n.setCurrent("kill %d during its snapshot install", f)
	installed := n.watch(ctx, f, killAfter, time.Millisecond, func(_, now MemberMetrics) bool {
		return now.Installed > before.Installed
	})
	n.Sup.kill(f)
	fault.Kill{Nodes: []int{f}}.Record(n.Rec)
	if past {
		if installed {
			n.Counts.AfterInstall.Add(1)
		} else {
			n.Counts.DuringInstall.Add(1)
		}
	}
	return n.restart([]int{f}), fmt.Sprintf("isolate %d past compaction, heal, kill", f)
}

// isolatePastLeader cuts a follower drawn by rng off until the leader has
// compacted its log past the follower's applied index, or the bound
// passed (past false), and returns it, still cut off.
func (n *Nemesis) isolatePastLeader(ctx context.Context, rng *rand.Rand) (f int, past bool) {
	leader := n.Sup.Leader(ctx)
	var others []int
	for _, id := range n.Sup.IDs() {
		if id != leader {
			others = append(others, id)
		}
	}
	f = others[rng.IntN(len(others))]
	p := fault.Isolate(view{ctx, n.Sup}, f)
	p.Record(n.Rec)
	n.Sup.SetLinks(p.Connected)
	n.setCurrent("isolate %d until the leader compacts past it", f)
	past = n.compactedPast(ctx, f)
	if past {
		n.Counts.Compacted.Add(1)
	} else {
		n.Counts.SnapshotTimeout.Add(1)
	}
	return f, past
}

// cutSnapshotStream is the failpoint of a snapshot transfer: it cuts a
// follower off until the leader compacted past it, arms every link into
// it to cut the next snapshot stream once a drawn share (5 to 95 %) of
// the data went through, heals, and waits (up to the bound) for the cut.
// The follower stays up: it must throw away what it received (rule 10:
// a snapshot reaches raft only whole with its announced size and
// SHA-256), and the leader sends the snapshot again, whole. Only a
// snapshot of several chunks can be cut before its end: a run with held
// locks (chaos --held) has them.
func (n *Nemesis) cutSnapshotStream(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	frac := 0.05 + 0.9*rng.Float64()
	f, _ := n.isolatePastLeader(ctx, rng)
	done := n.Sup.ArmSnapshotCut(f, frac)
	defer n.Sup.DisarmSnapshotCut(f)
	n.Sup.Heal()
	fault.Heal{}.Record(n.Rec)
	n.setCurrent("cut the snapshot stream to %d at %.0f%%", f, 100*frac)
	wait := time.NewTimer(snapshotWait)
	defer wait.Stop()
	for {
		select {
		case c := <-done:
			if !c.Cut {
				continue // a stream that ended first; another link may still cut
			}
			n.Counts.SnapshotCuts.Add(1)
			fault.SnapshotCut{From: c.From, To: c.To}.Record(n.Rec)
			return func(context.Context) {}, fmt.Sprintf("cut the snapshot stream %d->%d after %d of %d bytes", c.From, c.To, c.Forwarded, c.Size)
		case <-wait.C:
		case <-ctx.Done():
		}
		n.Counts.SnapshotTimeout.Add(1)
		return func(context.Context) {}, fmt.Sprintf("isolate %d past compaction, heal: no snapshot stream to cut", f)
	}
}

// compactedPast waits, up to the bound, until some leader's first stored
// index is above member f's applied index.
func (n *Nemesis) compactedPast(ctx context.Context, f int) bool {
	return pollUntil(ctx, snapshotWait, 50*time.Millisecond, func(ctx context.Context) bool {
		var wg sync.WaitGroup
		var mf MemberMetrics
		var errf error
		wg.Go(func() { mf, errf = n.Sup.Metrics(ctx, f) })
		leader := n.Sup.Leader(ctx)
		wg.Wait()
		if leader == 0 || leader == f || errf != nil {
			return false
		}
		ml, err := n.Sup.Metrics(ctx, leader)
		return err == nil && ml.FirstIndex > mf.Applied
	})
}

// clientPause stops a client process drawn by rng at its next critical
// section (or wherever it is after clientPauseWait); its heal continues
// it once it was stopped for ClientPauseMin, past its lease.
func (n *Nemesis) clientPause(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	cp := n.Clients[rng.IntN(len(n.Clients))]
	n.setCurrent("pause client %d at its next critical section", cp.id)
	n.Counts.ClientPauses.Add(1)
	if cp.pause(ctx, clientPauseWait) {
		n.Counts.ClientPausesHolding.Add(1)
	}
	return func(context.Context) { cp.resume(n.ClientPauseMin) }, fmt.Sprintf("pause client %d", cp.id)
}

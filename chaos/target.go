package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/internal/procgroup"
)

// Target is the lock service a chaos run tries (raftlock chaos --target):
// raftlock itself, or a peer started, driven and faulted by an adapter
// (etcd.go, redis.go) under the same workload, nemesis schedule, history
// format, checks and reports.
type Target string

// The targets.
const (
	TargetRaftlock Target = "raftlock"
	TargetEtcd     Target = "etcd"
	TargetRedis    Target = "redis"
)

// Targets are the valid targets, in the order --target documents them.
var Targets = []Target{TargetRaftlock, TargetEtcd, TargetRedis}

// joinTargets lists the targets as --target takes them.
func joinTargets() string {
	parts := make([]string, len(Targets))
	for i, t := range Targets {
		parts[i] = string(t)
	}
	return strings.Join(parts, "|")
}

// target is the run's target: raftlock unless another was asked.
func (c *Config) target() Target {
	if c.Target == "" {
		return TargetRaftlock
	}
	return c.Target
}

// validateTarget checks the settings a peer target cannot take.
func (c *Config) validateTarget() error {
	t := c.target()
	switch {
	case !slices.Contains(Targets, t):
		return fmt.Errorf("unknown --target %q (want %s)", t, joinTargets())
	case t == TargetRaftlock:
		return nil
	case c.Bug != "":
		return fmt.Errorf("--unsafe-bug plants bugs in raftlock's members, not with --target %s", t)
	case c.Held > 0:
		return fmt.Errorf("--held fills raftlock's table: not with --target %s", t)
	case c.Nodes != 3:
		return fmt.Errorf("--target %s runs three members (etcd) or a primary, a replica and three Sentinels (redis): --nodes must be 3", t)
	case c.usesAPI():
		return fmt.Errorf("--protocols are raftlock's: --target %s speaks its own", t)
	}
	return nil
}

// notCarried says why the run's target cannot carry family out, "" when
// it can. Families a target cannot carry out are named in the header and
// summary.md, never dropped silently.
func (c *Config) notCarried(f fault.Family) string {
	if slices.Contains(ClientFamilies, f) {
		if c.ClientProcs == 0 {
			return "it stops client processes, and --client-procs is 0"
		}
		return ""
	}
	t := c.target()
	if t == TargetRaftlock {
		return ""
	}
	switch f {
	case fault.FamilyKill, fault.FamilyPause, fault.FamilyPartition:
		return ""
	case fault.FamilyClock:
		return string(t) + " reads the system clock, which only root can skew"
	case fault.FamilyNet:
		return "the byte-stream proxies of " + string(t) + "'s links can cut them but not delay or drop messages whose boundaries they do not see"
	case fault.FamilySnapshot:
		return "it aims at raftlock's own snapshot streams"
	case fault.FamilyGarbage, fault.FamilyGarbageHeartbeat:
		return "it forges raftlock's peer and client frames"
	case fault.FamilyMembership:
		return "it changes members through raftlock's admin commands"
	}
	return "not implemented for " + string(t)
}

// notRunLine is summary.md's line naming the families not run and why:
// for a raftlock run it is the line it always was.
func notRunLine(c *Config, notRun []fault.Family) string {
	var parts []string
	same := true
	for _, f := range notRun {
		why := c.notCarried(f)
		same = same && slices.Contains(ClientFamilies, f)
		parts = append(parts, fmt.Sprintf("%s (%s)", f, why))
	}
	if same {
		return fmt.Sprintf("Not run: %s (it stops client processes, and --client-procs is 0).", fault.Join(notRun))
	}
	return "Not run: " + strings.Join(parts, "; ") + "."
}

// peerService is a lock service other than raftlock as a chaos run drives it:
// its processes started and faulted, its clients dialled. Members are
// numbered from 1 in the history's fault events.
type peerService interface {
	// Start starts the service and waits until it answers.
	Start(ctx context.Context) error
	// IDs are the members the kill and pause families aim at.
	IDs() []int
	// Leader is the member that leads (etcd) or is primary (redis), 0 if
	// unknown.
	Leader(ctx context.Context) int
	// Draw is the faulted members of family drawn from rng: the targets
	// of a kill or pause, or the groups a partition splits into.
	Draw(ctx context.Context, rng *rand.Rand, family fault.Family) fault.Fault
	Kill(id int)
	Restart(id int) error
	Pause(id int)
	Resume(id int)
	// SetLinks cuts every link between two members (or processes) that
	// connected says may not talk.
	SetLinks(connected func(i, j int) bool)
	// WaitReady waits until the service answers a write again.
	WaitReady(ctx context.Context) error
	// Endpoints are what its clients dial; Dial makes one client of them.
	Endpoints() []string
	Dial(endpoints []string) (LockClient, error)
	// Crashes are members that exited without the harness killing them.
	Crashes() []Crash
	// Notes say how the target's semantics differ from raftlock's, for
	// summary.md.
	Notes() []string
	// PauseMin is how long a client pause must last to outlive a lease
	// of max (the target may round leases up).
	PauseMin(max time.Duration) time.Duration
	Close()
}

// newPeer makes the run's peer target.
func newPeer(c *Config, dir string) (peerService, error) {
	switch c.target() {
	case TargetEtcd:
		return newEtcdPeer(dir, c.Seed, c.Log), nil
	case TargetRedis:
		return newRedisPeer(dir, c.Seed, c.Log), nil
	}
	return nil, fmt.Errorf("no peer adapter for --target %s", c.target())
}

// dialPeer makes a client of target for a chaos-client process, which
// knows the endpoints and the target only.
func dialPeer(t Target, endpoints []string) (LockClient, error) {
	switch t {
	case TargetEtcd:
		return dialEtcd(endpoints)
	case TargetRedis:
		return dialRedis(endpoints)
	}
	return nil, errors.New("no peer adapter for target " + string(t))
}

// peerFaults carries the nemesis's faults out on a peer target: the
// families it supports, drawn from the same seeded stream.
type peerFaults struct {
	p       peerService
	rec     *history.Recorder
	stopped map[int]bool // killed members not yet restarted; the nemesis's goroutine only
	paused  map[int]bool
}

// appendExited adds to crashes the process of a peer's server id when it
// exited without the harness killing it, with what its log says it died of.
func appendExited(crashes []Crash, id int, proc *procgroup.Proc, killed bool) []Crash {
	if proc == nil || killed || proc.Running() {
		return crashes
	}
	return append(crashes, Crash{Node: id, Err: "exited", Reason: crashReason(proc.LogPath()), Log: proc.LogPath()})
}

// inject draws one fault of family and carries it out, returning its
// heal and a description.
func (pf *peerFaults) inject(ctx context.Context, rng *rand.Rand, family fault.Family) (func(context.Context), string) {
	f := pf.p.Draw(ctx, rng, family)
	f.Record(pf.rec)
	switch f := f.(type) {
	case fault.Kill:
		for _, id := range f.Nodes {
			pf.p.Kill(id)
			pf.stopped[id] = true
		}
		return func(context.Context) {
			for _, id := range f.Nodes {
				pf.p.Restart(id)
				delete(pf.stopped, id)
			}
			fault.Start(f).Record(pf.rec)
		}, fmt.Sprintf("kill %v", f.Nodes)
	case fault.Pause:
		for _, id := range f.Nodes {
			pf.p.Pause(id)
			pf.paused[id] = true
		}
		return func(context.Context) {
			for _, id := range f.Nodes {
				pf.p.Resume(id)
				delete(pf.paused, id)
			}
			fault.Resume(f).Record(pf.rec)
		}, fmt.Sprintf("pause %v", f.Nodes)
	case fault.Partition:
		pf.p.SetLinks(f.Connected)
		return func(context.Context) {
			pf.p.SetLinks(func(int, int) bool { return true })
			fault.Heal{}.Record(pf.rec)
		}, fmt.Sprintf("partition %v", f.Groups)
	}
	return func(context.Context) {}, "none"
}

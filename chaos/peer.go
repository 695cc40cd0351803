package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/procgroup"
)

// peerService is a lock service other than raftlock as a chaos run drives it:
// its processes started and faulted, its clients dialled. Members are
// numbered from 1 in the history's fault events.
type peerService interface {
	// Start starts the service and waits until it answers.
	Start(ctx context.Context) error
	// IDs are the members the kill, pause and power families aim at.
	IDs() []int
	// DataDir is where member id keeps its data: with the power
	// families the harness mounts it on lazyfs before Start.
	DataDir(id int) string
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
	// Endpoints are what its clients dial (peerDialer).
	Endpoints() []string
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
		return newEtcdPeer(dir, c.Seed), nil
	case TargetRedis:
		return newRedisPeer(dir, c.Seed, c.RedisFsync), nil
	case TargetNats:
		return newNatsPeer(dir, c.Seed, c.NatsServer, c.NatsSync, c.LeaseMax), nil
	}
	return nil, fmt.Errorf("no peer adapter for --target %s", c.target())
}

// peerDialer is a Workload's Dial for a peer target: the harness's
// clients and a chaos-client process's, which knows the endpoints and the
// target and the longest lease only, dial alike.
func peerDialer(t Target, leaseMax time.Duration) func(i int, endpoints []string) (LockClient, error) {
	return func(_ int, endpoints []string) (LockClient, error) {
		switch t {
		case TargetEtcd:
			return dialEtcd(endpoints)
		case TargetRedis:
			return dialRedis(endpoints)
		case TargetNats:
			return dialNats(endpoints, leaseMax)
		}
		return nil, errors.New("no peer adapter for target " + string(t))
	}
}

// peerFaults carries the nemesis's faults out on a peer target: the
// families it supports, drawn from the same seeded stream.
type peerFaults struct {
	p       peerService
	rec     *history.Recorder
	stopped map[int]bool // killed members not yet restarted; the nemesis's goroutine only
	paused  map[int]bool
	pw      peerPower // the power families' mounts and counters
}

// peerServers is what both peer targets keep of their server processes:
// the directory they write in, the seed of their links' faults, the
// process group, the addresses handed out, and the members the nemesis's
// kills and pauses aim at.
type peerServers[M peerMember] struct {
	dir  string
	seed uint64

	procs   procgroup.Group
	ports   freeport.Picker // each address handed out once
	members []M             // index id-1
}

// peerMember is a server process the nemesis stops and starts: the
// target's member type, which embeds a peerProc.
type peerMember interface {
	kill()
	restart(*procgroup.Group) error
	pause()
	resume()
}

func (s *peerServers[M]) Kill(id int)          { s.members[id-1].kill() }
func (s *peerServers[M]) Restart(id int) error { return s.members[id-1].restart(&s.procs) }
func (s *peerServers[M]) Pause(id int)         { s.members[id-1].pause() }
func (s *peerServers[M]) Resume(id int)        { s.members[id-1].resume() }

// peerProc is one server process of a peer target, as the nemesis kills,
// restarts, pauses and resumes it (on its goroutine only). killed says
// the harness killed it, so its exit is no crash.
type peerProc struct {
	id     int
	proc   *procgroup.Proc
	killed bool
}

func (m *peerProc) kill() {
	m.killed = true
	m.proc.Kill()
}

func (m *peerProc) restart(g *procgroup.Group) error {
	if err := g.Restart(m.proc); err != nil {
		return err
	}
	m.killed = false
	return nil
}

func (m *peerProc) pause()  { m.proc.Signal(syscall.SIGSTOP) }
func (m *peerProc) resume() { m.proc.Signal(syscall.SIGCONT) }

// crash is the process's exit when it exited without the harness killing
// it, with what its log says it died of; nil while it runs.
func (m *peerProc) crash() *Crash {
	if m.proc == nil || m.killed || m.proc.Running() {
		return nil
	}
	return &Crash{Node: m.id, Err: "exited", Reason: procgroup.ExitReason(m.proc.LogPath()), Log: m.proc.LogPath()}
}

// crashesOf are the crashes of a peer's servers, in the order given.
func crashesOf[S interface{ crash() *Crash }](groups ...[]S) []Crash {
	var out []Crash
	for _, g := range groups {
		for _, s := range g {
			if c := s.crash(); c != nil {
				out = append(out, *c)
			}
		}
	}
	return out
}

// clientAddrs are the addresses clients dial, of each server in group.
func clientAddrs[S interface{ clientAddr() string }](group []S) []string {
	out := make([]string, 0, len(group))
	for _, s := range group {
		out = append(out, s.clientAddr())
	}
	return out
}

// inject draws one fault of family and carries it out, returning its
// heal and a description.
func (pf *peerFaults) inject(ctx context.Context, rng *rand.Rand, family fault.Family) (func(context.Context), string) {
	if family == fault.FamilyPower || family == fault.FamilyPowerAll {
		return pf.power(ctx, rng, family == fault.FamilyPowerAll)
	}
	f := pf.p.Draw(ctx, rng, family)
	f.Record(pf.rec)
	switch f := f.(type) {
	case fault.Kill:
		return pf.stop(f.Nodes, pf.p.Kill, func(id int) { pf.p.Restart(id) }, pf.stopped, fault.Start(f)), fmt.Sprintf("kill %v", f.Nodes)
	case fault.Pause:
		return pf.stop(f.Nodes, pf.p.Pause, pf.p.Resume, pf.paused, fault.Resume(f)), fmt.Sprintf("pause %v", f.Nodes)
	case fault.Partition:
		pf.p.SetLinks(f.Connected)
		return func(context.Context) {
			pf.p.SetLinks(func(int, int) bool { return true })
			fault.Heal{}.Record(pf.rec)
		}, fmt.Sprintf("partition %v", f.Groups)
	}
	return func(context.Context) {}, "none"
}

// stop carries out a fault that stops members (a kill, a pause): each is
// stopped and marked in down until the heal returned starts it again and
// records healed.
func (pf *peerFaults) stop(nodes []int, stop, start func(id int), down map[int]bool, healed fault.Fault) func(context.Context) {
	for _, id := range nodes {
		stop(id)
		down[id] = true
	}
	return func(context.Context) {
		for _, id := range nodes {
			start(id)
			delete(down, id)
		}
		healed.Record(pf.rec)
	}
}

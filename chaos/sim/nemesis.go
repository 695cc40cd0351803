package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
)

// nemesis carries out the faults the fault package draws from the seed:
// one at a time, the families in rounds (fault.Rounds). Faults are
// recorded in the history as the chaos harness records them, after they
// take effect, so the checker's clock model reads them the same way.
type nemesis struct {
	s        *sim
	rng      *rand.Rand
	rounds   *fault.Rounds
	injected int
	heal     func() // the fault in force, nil: none
	stopped  bool
}

func newNemesis(s *sim) *nemesis {
	rng := fault.NewRand(s.cfg.Seed)
	return &nemesis{s: s, rng: rng, rounds: fault.NewRounds(rng, s.cfg.Faults, "")}
}

// jitter is fault.Jitter in simulated nanoseconds.
func jitter(rng *rand.Rand, d time.Duration) int64 { return int64(fault.Jitter(rng, d)) }

// step injects the next fault and schedules its heal, then the next step.
func (n *nemesis) step() {
	s := n.s
	if n.stopped || (s.cfg.MaxFaults > 0 && n.injected >= s.cfg.MaxFaults) {
		return
	}
	if s.mem.busy() {
		// A membership change runs alone, to its end (membership.go).
		s.sch.after(int64(100*time.Millisecond), n.step)
		return
	}
	family := n.rounds.Next()
	if slices.Contains(s.cfg.SkipFaults, n.injected+1) {
		// Skipped (by shrinking): the schedule goes on as if this fault had
		// come and gone, so the faults after it keep their turn.
		n.injected++
		if s.tr.on() {
			s.tr.printf("fault %d (%s) skipped", n.injected, family)
		}
		s.sch.after(jitter(n.rng, s.cfg.FaultDuration)+jitter(n.rng, s.cfg.FaultInterval), n.step)
		return
	}
	heal := n.inject(family)
	if heal == nil {
		s.sch.after(jitter(n.rng, s.cfg.FaultInterval), n.step)
		return
	}
	n.injected++
	s.stats.Faults[family]++
	n.heal = heal
	s.sch.after(jitter(n.rng, s.cfg.FaultDuration), func() {
		if n.heal == nil {
			return // healed by stop
		}
		n.heal()
		n.heal = nil
		s.sch.after(jitter(n.rng, s.cfg.FaultInterval), n.step)
	})
}

// stop heals the fault in force and injects no more.
func (n *nemesis) stop() {
	n.stopped = true
	if n.heal != nil {
		n.heal()
		n.heal = nil
	}
	// A member stopped by an I/O error after its disk fault healed, or a
	// member paused: nothing stays broken past the workload.
	for _, m := range n.s.nodes {
		m.ioErr, m.slowSync = 0, 0
	}
}

// view is the simulated cluster as the fault package draws from it.
type view struct{ s *sim }

func (v view) Members() []int { return v.s.memberIDs() }

func (v view) Up() []int {
	var ids []int
	for _, m := range v.s.nodes {
		if m.up() {
			ids = append(ids, int(m.id))
		}
	}
	return ids
}

func (v view) Leader() int {
	if l := v.s.leader(); l != nil {
		return int(l.id)
	}
	return 0
}

// inject starts one fault of family and returns its heal (nil: nothing
// to do, e.g. every member is already down). The kill, crash and
// partition families are now and then aimed at a moment of the protocol
// (a snapshot, a grant's commit, a snapshot stream, a leader that has not
// noticed it is cut off, a grant whose requester leaves in flight), which
// only the simulator can catch.
func (n *nemesis) inject(family fault.Family) func() {
	s := n.s
	if s.tr.on() {
		s.tr.printf("fault %s", family)
	}
	switch family {
	case fault.FamilyKill, fault.FamilyCrash:
		return n.kill(family)
	case fault.FamilyPause:
		return n.pause(fault.DrawPause(n.rng, view{s}))
	case fault.FamilyPartition:
		if n.rng.IntN(4) == 0 {
			if heal := n.breakTransfer(family); heal != nil {
				return heal
			}
		}
		if n.rng.IntN(3) == 0 {
			if heal := n.isolateUnawareLeader(); heal != nil {
				return heal
			}
		}
		if n.rng.IntN(3) == 0 {
			if heal := n.orphanAGrant(); heal != nil {
				return heal
			}
		}
		n.cut(fault.DrawCut(n.rng, view{s}))
		return n.healLinks
	case fault.FamilyNet:
		return n.net(fault.DrawNet(n.rng, view{s}, true))
	case fault.FamilyClock:
		return n.clock(fault.DrawClocks(n.rng, view{s}))
	case fault.FamilyDisk:
		return n.disk(fault.DrawDisk(n.rng, view{s}))
	case fault.FamilyMembership:
		return n.membership()
	}
	panic(fmt.Sprintf("unknown fault family %q", family))
}

// kill stops members: one time in four right after a snapshot, else
// (when a moment is at hand) at a grant's commit or in a snapshot stream,
// or the targets at once. crash is a power loss: a kill the disk
// remembers less of (the history knows kills only).
func (n *nemesis) kill(family fault.Family) func() {
	s := n.s
	powerLoss := family == fault.FamilyCrash
	switch n.rng.IntN(4) {
	case 0:
		return n.crashAtSnapshot(powerLoss)
	case 1:
		if heal := n.crashAtGrantCommit(); heal != nil {
			return heal
		}
	case 2:
		if heal := n.breakTransfer(family); heal != nil {
			return heal
		}
	}
	k := fault.DrawKill(n.rng, view{s})
	if k.Nodes == nil {
		return nil
	}
	for _, id := range k.Nodes {
		s.crash(s.nodes[id-1], powerLoss)
	}
	k.Record(s)
	return func() { n.restart(k.Nodes...) }
}

// restart starts again those of nodes that can be.
func (n *nemesis) restart(nodes ...int) {
	s := n.s
	var started []int
	for _, id := range nodes {
		if m := s.nodes[id-1]; m.restartable() {
			s.start(m)
			started = append(started, id)
		}
	}
	if len(started) > 0 {
		fault.Start{Nodes: started}.Record(s)
	}
}

// pause freezes members until the heal.
func (n *nemesis) pause(p fault.Pause) func() {
	s := n.s
	if p.Nodes == nil {
		return nil
	}
	for _, id := range p.Nodes {
		s.nodes[id-1].paused = true
	}
	p.Record(s)
	return func() {
		for _, id := range p.Nodes {
			m := s.nodes[id-1]
			if m.paused {
				m.paused = false
				s.resume(m)
				s.drain(m)
			}
		}
		fault.Resume(p).Record(s)
	}
}

// sortedLinks lists every directed link between members in order.
func (s *sim) sortedLinks() [][2]uint64 {
	var out [][2]uint64
	for _, l := range fault.Links(view{s}) {
		out = append(out, [2]uint64{uint64(l[0]), uint64(l[1])})
	}
	return out
}

// cut cuts the links c does not keep.
func (n *nemesis) cut(c fault.Cut) {
	s := n.s
	for _, l := range s.sortedLinks() {
		s.link(l[0], l[1]).cut = !c.Connected(int(l[0]), int(l[1]))
	}
	c.Record(s)
}

func (n *nemesis) healLinks() {
	for _, l := range n.s.sortedLinks() {
		n.s.link(l[0], l[1]).cut = false
	}
	fault.Heal{}.Record(n.s)
}

// net slows, thins, duplicates and reorders the messages of the links
// drawn; the members' client traffic is slowed as their links are.
func (n *nemesis) net(f fault.Net) func() {
	s := n.s
	l := link{delay: int64(f.Delay), jitter: int64(f.Jitter), loss: f.Loss, dup: f.Dup}
	if f.Dup > 0 {
		l.jitter = max(l.jitter, int64(20*time.Millisecond)) // duplicates and reordering go together
	}
	f.Record(s)
	touched := make([]bool, len(s.nodes)+1)
	for _, k := range f.Links {
		*s.link(uint64(k[0]), uint64(k[1])) = l
		touched[k[0]], touched[k[1]] = true, true
	}
	for id, t := range touched {
		if t {
			s.nodes[id-1].clientDelay = l.delay
		}
	}
	return func() {
		for _, k := range f.Links {
			lk := s.link(uint64(k[0]), uint64(k[1]))
			*lk = link{cut: lk.cut}
		}
		for _, m := range s.nodes {
			m.clientDelay = 0
		}
		fault.Heal{Links: f.Links}.Record(s)
	}
}

// clock runs the targets' clocks at 0.25x to 4x, or makes them jump 0.1 to
// 3 s forward or back; ticks and lease deadlines follow.
func (n *nemesis) clock(clocks []fault.Clock) func() {
	s := n.s
	if clocks == nil {
		return nil
	}
	for _, c := range clocks {
		n.setClock(c)
	}
	return func() {
		for _, c := range clocks {
			if s.nodes[c.Node-1].up() { // else a restart gave it a true clock
				n.setClock(fault.TrueClock(c.Node))
			}
		}
	}
}

// setClock carries out a clock fault.
func (n *nemesis) setClock(c fault.Clock) {
	s := n.s
	m := s.nodes[c.Node-1]
	m.clk.set(s.sch.now, c.Rate, c.OffsetMS*int64(time.Millisecond))
	s.scheduleTick(m)
	c.Record(s)
}

// disk makes the targets' writes fail now and then (the member stops, and
// the heal restarts it from its disk) or their syncs slow (the member is
// blocked meanwhile), or both.
func (n *nemesis) disk(d fault.Disk) func() {
	s := n.s
	if d.Nodes == nil {
		return nil
	}
	for i, id := range d.Nodes {
		m, f := s.nodes[id-1], d.Disks[i]
		m.ioErr, m.slowSync, m.slowMax = f.IOErr, f.SlowSync, int64(f.SlowMax)
		if s.tr.on() {
			s.tr.printf("disk node=%d io-error=%g slow-sync=%g slow-max=%dms", id, m.ioErr, m.slowSync, m.slowMax/1e6)
		}
	}
	d.Record(s)
	return func() {
		var started []int
		for _, id := range d.Nodes {
			m := s.nodes[id-1]
			m.ioErr, m.slowSync = 0, 0
			if m.stopped {
				s.start(m)
				started = append(started, id)
			}
		}
		if len(started) > 0 {
			fault.Start{Nodes: started}.Record(s)
		}
		fault.Heal{Nodes: d.Nodes}.Record(s)
	}
}

// crashAtSnapshot is the chaos harness's snapshot nemesis, with the moment
// hit exactly: either a member crashes right after it stores a snapshot of
// its own (a compaction), or a follower is cut off until the leader has
// compacted its log past it, the cut heals, and the follower crashes right
// after it installs the leader's snapshot (its acknowledgement on the
// wire). If the moment does not come before the fault's end, nothing
// crashes.
func (n *nemesis) crashAtSnapshot(powerLoss bool) func() {
	s := n.s
	f := &snapshotCrash{n: n, powerLoss: powerLoss}
	f.victim, f.cut = n.snapshotVictim()
	if f.victim == nil {
		return nil
	}
	if f.cut {
		n.isolate(f.victim)
	}
	if s.tr.on() {
		s.tr.printf("fault crash-at-snapshot node=%d isolate=%v power-loss=%v", f.victim.id, f.cut, powerLoss)
	}
	if f.cut {
		// Heal once the leader's log starts above what the victim applied
		// (polled every 20ms): only a snapshot can bring it back.
		f.poll()
	} else {
		f.arm()
	}
	return f.heal
}

// snapshotVictim draws the member crashAtSnapshot aims at: any member up,
// or a follower to cut off first (cut); nil if there is no leader, or no
// follower to cut off.
func (n *nemesis) snapshotVictim() (victim *node, cut bool) {
	s := n.s
	var up []*node
	for _, m := range s.nodes {
		if m.up() {
			up = append(up, m)
		}
	}
	leader := s.leader()
	if len(up) == 0 || leader == nil {
		return nil, false
	}
	if n.rng.IntN(2) == 0 {
		return up[n.rng.IntN(len(up))], false
	}
	followers := slices.DeleteFunc(up, func(m *node) bool { return m == leader })
	if len(followers) == 0 {
		return nil, false
	}
	return followers[n.rng.IntN(len(followers))], true
}

// snapshotCrash is one crashAtSnapshot fault in force.
type snapshotCrash struct {
	n         *nemesis
	victim    *node
	powerLoss bool
	cut       bool // the victim is cut off
	done      bool
}

// arm crashes the victim after its next snapshot, stored or installed.
func (f *snapshotCrash) arm() {
	s, victim := f.n.s, f.victim
	victim.onSnapshot = func(installed bool) {
		victim.onSnapshot = nil
		if installed {
			s.stats.CrashAfterInstall++
		} else {
			s.stats.CrashAfterSnapshot++
		}
		// After the current Ready: the acknowledgement is on its way.
		s.sch.after(1, func() {
			if victim.up() {
				s.crash(victim, f.powerLoss)
				fault.Kill{Nodes: []int{int(victim.id)}}.Record(s)
			}
		})
	}
}

// poll heals the cut and arms the crash once the leader compacted past
// the victim.
func (f *snapshotCrash) poll() {
	if f.done {
		return
	}
	if f.n.compactedPast(f.victim) {
		f.n.healLinks()
		f.cut = false
		f.arm()
		return
	}
	f.n.s.sch.after(int64(20*time.Millisecond), f.poll)
}

// heal ends the fault: the cut healed, the victim restarted.
func (f *snapshotCrash) heal() {
	f.done = true
	f.victim.onSnapshot = nil
	if f.cut {
		f.n.healLinks()
	}
	f.n.restart(int(f.victim.id))
}

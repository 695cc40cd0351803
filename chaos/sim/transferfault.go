package sim

import (
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
)

// breakTransfer is a fault aimed at a snapshot in flight, as etcd's
// robustness tests place failpoints at protocol moments: left to chance,
// a fault rarely meets a stream that lasts milliseconds. A follower is cut
// off until the leader has compacted its log past it (only a snapshot can
// bring it back), the cut heals, and once a snapshot starts streaming to
// it the stream is broken at a seeded point of its chunks: the partition
// family cuts the link again, kill and crash stop one end (either one).
// If the moment does not come before the fault's end, nothing breaks.
func (n *nemesis) breakTransfer(family fault.Family) func() {
	s := n.s
	leader := s.leader()
	if leader == nil {
		return nil
	}
	var followers []*node
	for _, m := range s.nodes {
		if m.up() && m != leader {
			followers = append(followers, m)
		}
	}
	if len(followers) == 0 {
		return nil
	}
	victim := followers[n.rng.IntN(len(followers))]
	frac := n.rng.Float64()
	stopSender := n.rng.IntN(2) == 0
	if s.tr.on() {
		s.tr.printf("fault break-transfer node=%d family=%s at=%.2f stop-sender=%v", victim.id, family, frac, stopSender)
	}
	n.isolate(victim)
	f := &transferFault{n: n, victim: victim, cut: true}
	f.poll = func() {
		if f.over || !f.cut {
			return
		}
		if n.compactedPast(victim) {
			n.healLinks()
			f.cut = false
			s.onTransfer = func(t *transfer) { f.aim(t, family, frac, stopSender) }
			return
		}
		s.sch.after(int64(20*time.Millisecond), f.poll)
	}
	f.poll()
	return f.heal
}

// transferFault is one breakTransfer fault in force.
type transferFault struct {
	n      *nemesis
	victim *node
	cut    bool  // some link is cut by this fault
	killed *node // the end it stopped
	over   bool
	poll   func()
}

// aim arranges the break of t, a stream to the victim, partway through
// its chunks.
func (f *transferFault) aim(t *transfer, family fault.Family, frac float64, stopSender bool) {
	s := f.n.s
	if t.to != f.victim {
		return
	}
	s.onTransfer = nil
	// The header takes about a millisecond; then the chunks.
	at := int64(time.Millisecond) + int64(frac*float64(t.duration()))
	s.sch.after(at, func() {
		if f.over || t.done {
			return
		}
		s.stats.TransferFaults++
		if family == fault.FamilyPartition {
			s.link(t.from.id, t.to.id).cut, s.link(t.to.id, t.from.id).cut = true, true
			f.cut = true
			fault.OneWay{Links: [][2]int{{int(t.from.id), int(t.to.id)}, {int(t.to.id), int(t.from.id)}}}.Record(s)
			return
		}
		end := t.to
		if stopSender {
			end = t.from
		}
		s.crash(end, family == fault.FamilyCrash)
		f.killed = end
		fault.Kill{Nodes: []int{int(end.id)}}.Record(s)
	})
}

// heal ends the fault: links back, the stopped end restarted.
func (f *transferFault) heal() {
	s := f.n.s
	f.over = true
	s.onTransfer = nil
	if f.cut {
		f.n.healLinks()
	}
	if k := f.killed; k != nil {
		f.n.restart(int(k.id))
	}
}

// isolate cuts every link of m, both ways.
func (n *nemesis) isolate(m *node) {
	n.cut(fault.Isolate(view{n.s}, int(m.id)))
}

// compactedPast says whether the leader's log starts above what m
// applied: only a snapshot can bring m back.
func (n *nemesis) compactedPast(m *node) bool {
	s := n.s
	l := s.leader()
	st, ok := s.status(m)
	if l == nil || l == m || !ok {
		return false
	}
	first, _ := l.disk.FirstIndex()
	return first > st.Applied+1
}

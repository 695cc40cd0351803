package sim

import (
	"maps"
	"slices"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
)

// unawareLeaderRate is the clock rate of a leader the aimed fault below
// isolates: a hundredth, so it counts the ten ticks of an election
// timeout in ten seconds, longer than any fault lasts.
const unawareLeaderRate = 0.01

// isolateUnawareLeader is a fault aimed at a deposed leader that has not
// noticed (the case backups must survive, rule 9). Left to chance the
// leader a partition cuts off steps down (CheckQuorum) about when the
// others elect its successor, and every client is waiting on it then, so
// nothing the successor acknowledges meets a call to the old leader. So
// the leader is cut off from every other member (its clients still reach
// it) and its clock nearly stops, as on a host starved of CPU whose ticker
// fires late: it goes on believing it leads. Once the successor passes its
// term barrier, the old leader's client connections reset, as in a
// network blip: their calls end as if it had died (a read is retried
// elsewhere, a lock call's outcome is unknown), it is told their
// requesters left (rule 7), and the clients that ask another member first
// reach the successor, while the ones that ask the old leader again, and
// the backup taker, still find it leading.
func (n *nemesis) isolateUnawareLeader() func() {
	s := n.s
	victim, st, ok := s.leaderStatus()
	if !ok {
		return nil
	}
	if s.tr.on() {
		s.tr.printf("fault isolate-unaware-leader node=%d term=%d", victim.id, st.Term)
	}
	s.stats.UnawareLeaders++
	n.isolate(victim)
	id := int(victim.id)
	n.setClock(fault.Clock{Node: id, Rate: unawareLeaderRate})
	inc := victim.incarnation
	over := false
	var poll func()
	poll = func() {
		if over || victim.incarnation != inc || !victim.up() {
			return
		}
		if l := s.leader(); l != nil && l != victim {
			if lst, ok := s.status(l); ok && lst.Term > st.Term && l.core.CanDecide() == nil {
				s.resetClients(victim)
				return
			}
		}
		s.sch.after(int64(10*time.Millisecond), poll)
	}
	poll()
	return func() {
		over = true
		n.healLinks()
		if victim.incarnation == inc && victim.up() {
			n.setClock(fault.TrueClock(id))
		}
	}
}

// resetClients breaks every client connection to m: each request in flight
// there ends for its client as if m had died, and m is told its requester
// left, as the production server tells its member when a connection drops.
func (s *sim) resetClients(m *node) {
	hs := slices.Sorted(maps.Keys(m.handles))
	if s.tr.on() {
		s.tr.printf("reset-clients node=%d requests=%d", m.id, len(hs))
	}
	for _, h := range hs {
		a := m.handles[h]
		delete(m.handles, h)
		s.input(m, input{kind: inAbandon, handle: h, key: a.op.key})
		s.toClient(m, func() { a.c.broken(a) })
	}
}

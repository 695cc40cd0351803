package sim

import (
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/member"
)

// orphanAGrant is a fault aimed at rule 7's hardest case, a Grant whose
// requester leaves while it is in flight and whose leader then steps down
// (an orphan). At the moment the leader proposes a Grant, its followers'
// answers stop reaching it (a one-way cut: they still store what it sends)
// and its client connections reset, so the Grant's requester is gone. The
// leader steps down (CheckQuorum) with the Grant orphaned, the others
// elect a leader that commits it, and the old leader applies it once the
// cut heals, or leads again before it has. Left to chance, a requester
// almost never leaves between its Grant's proposal and its leader's
// step-down: a caller still there is told "outcome unknown" instead, and
// the Grant is not an orphan.
func (n *nemesis) orphanAGrant() func() {
	s := n.s
	victim, st, ok := s.leaderStatus()
	if !ok || victim.onCommit != nil {
		return nil
	}
	if s.tr.on() {
		s.tr.printf("fault orphan-a-grant node=%d term=%d", victim.id, st.Term)
	}
	inc := victim.incarnation
	armed, cut, over := true, false, false
	// Once another member leads past its barrier (it committed the Grant)
	// the cut heals, so that the old leader catches up by appends and
	// applies the Grant, rather than by a snapshot once the log has
	// moved on.
	var poll func()
	poll = func() {
		if over {
			return
		}
		if l := s.leader(); l != nil && l != victim {
			if lst, ok := s.status(l); ok && lst.Term > st.Term && l.core.CanDecide() == nil {
				over = true
				n.healLinks()
				return
			}
		}
		s.sch.after(int64(10*time.Millisecond), poll)
	}
	victim.onCommit = func(rd member.Ready) bool {
		if !holdsGrant(rd.Entries) {
			return false
		}
		victim.onCommit, armed, cut = nil, false, true
		s.stats.OrphanAims++
		var deaf [][2]int
		for _, l := range s.sortedLinks() {
			if l[1] == victim.id {
				deaf = append(deaf, [2]int{int(l[0]), int(l[1])})
			}
		}
		n.cut(fault.OneWay{Links: deaf})
		s.resetClients(victim)
		poll()
		return false // the appends go out: the followers store the Grant
	}
	return func() {
		if armed && victim.incarnation == inc {
			victim.onCommit = nil
		}
		if cut && !over {
			n.healLinks()
		}
		over = true
	}
}

package sim

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/member"
)

// orphanAGrant is a fault aimed at rule 7's hardest case, a Grant whose
// requester leaves while it is in flight and whose leader then steps down
// (an orphan), and at the moment that leader leads again. Left to chance,
// a requester almost never leaves between its Grant's proposal and its
// leader's step-down (a caller still there is told "outcome unknown"
// instead, and the Grant is not an orphan), and a deposed leader catches
// up as a follower before it leads again.
//
// At the moment the leader proposes a Grant, its client connections reset,
// so the Grant's requester is gone, and the links into it go blind: they
// lose its followers' answers of its term (they still store what it sends)
// and every message whose commit index reaches the Grant. The leader steps
// down (CheckQuorum) with the Grant orphaned; the others elect a leader,
// whose first append (sent before it knew the Grant committed) reaches the
// old leader, and which commits the Grant. Once that leader passed its
// barrier and showed the Grant's key to a get (the requester, told
// "outcome unknown", reads its lock as the API docs advise), it hands
// leadership back to the old one, which has its entry but never learnt
// that the Grant committed: the Grant applies before the old leader's new
// barrier, after another leader's entry. The links heal once the old
// leader leads past its barrier, or when the fault ends.
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
	armed, blind, over := true, false, false
	var into [][2]int
	heal := func() {
		if !blind || over {
			return
		}
		over = true
		for _, l := range into {
			s.link(uint64(l[0]), uint64(l[1])).blind = nil
		}
		fault.Heal{Links: into}.Record(s)
	}
	handedBack := false
	var key string
	var since int // s.events from the aim on
	shown := func() bool {
		for _, e := range s.events[since:] {
			if e.F == history.OpGet && e.Key == key && e.Type == history.OK && e.Value.Held != nil && *e.Value.Held {
				return true
			}
		}
		return false
	}
	var poll func()
	poll = func() {
		if over || victim.incarnation != inc || !victim.up() {
			return
		}
		l := s.leader()
		var lst member.Status
		if l != nil {
			lst, ok = s.status(l)
		}
		switch {
		case l == nil || !ok || lst.Term == st.Term:
		case l == victim:
			if victim.core.CanDecide() == nil {
				heal()
				return
			}
		case !handedBack:
			if l.core.CanDecide() == nil && shown() {
				handedBack = true
				s.input(l, input{kind: inCall, call: func(core *member.Core) {
					if _, err := core.TransferLeader(victim.id); err != nil && s.tr.on() {
						s.tr.printf("orphan-a-grant transfer to %d: %v", victim.id, err)
					}
				}})
			}
		}
		s.sch.after(int64(time.Millisecond), poll)
	}
	victim.onCommit = func(rd member.Ready) bool {
		var grant uint64
		grant, key, ok = firstGrant(rd.Entries)
		if !ok {
			return false
		}
		since = len(s.events)
		victim.onCommit, armed, blind = nil, false, true
		s.stats.OrphanAims++
		lost := func(m *raftpb.Message) bool {
			switch m.GetType() {
			case raftpb.MessageType_MsgAppResp, raftpb.MessageType_MsgHeartbeatResp:
				if m.GetTerm() == st.Term {
					return true
				}
			}
			return m.GetCommit() >= grant
		}
		for _, l := range s.sortedLinks() {
			if l[1] == victim.id {
				s.link(l[0], l[1]).blind = lost
				into = append(into, [2]int{int(l[0]), int(l[1])})
			}
		}
		fault.OneWay{Links: into}.Record(s)
		s.resetClients(victim)
		poll()
		return false // the appends go out: the followers store the Grant
	}
	return func() {
		if armed && victim.incarnation == inc {
			victim.onCommit = nil
		}
		heal()
		over = true
	}
}

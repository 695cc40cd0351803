package sim

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/member"
)

// crashAtGrantCommit kills the leader at the moment it learns that a Grant
// committed, before the message that tells the followers goes out. The
// next leader then holds the Grant in its log without knowing it is
// committed: until the first entry of its own term applies, its table
// shows the key free. That is the window the term barrier (rule 3)
// closes, and real timing hits it about once in a thousand runs. The peer
// links slow down at the same moment, as a congested network would, which
// stretches the window from one round trip to tens of milliseconds (the
// next leader's first entry commits only when a follower's answer comes
// back), so clients retrying on the new leader can land in it.
func (n *nemesis) crashAtGrantCommit() func() {
	s := n.s
	victim, st, ok := s.leaderStatus()
	if !ok {
		return nil
	}
	last := st.Commit
	if s.tr.on() {
		s.tr.printf("fault crash-at-grant-commit node=%d commit=%d", victim.id, last)
	}
	inc := victim.incarnation
	delay := int64(20+n.rng.IntN(61)) * int64(time.Millisecond)
	var slowed [][2]int
	victim.onCommit = func(rd member.Ready) bool {
		commit := rd.HardState.GetCommit()
		if rd.HardState == nil || commit <= last {
			return false
		}
		grant := committedGrant(victim, last, commit)
		last = commit
		if !grant {
			return false
		}
		victim.onCommit = nil
		s.stats.CrashAtGrantCommit++
		s.crash(victim, false)
		fault.Kill{Nodes: []int{int(victim.id)}}.Record(s)
		for _, l := range s.sortedLinks() {
			s.link(l[0], l[1]).delay = delay
			slowed = append(slowed, [2]int{int(l[0]), int(l[1])})
		}
		fault.Net{Links: slowed, Delay: time.Duration(delay)}.Record(s)
		return true
	}
	return func() {
		victim.onCommit = nil
		if slowed != nil {
			for _, l := range s.sortedLinks() {
				s.link(l[0], l[1]).delay = 0
			}
			fault.Heal{Links: slowed}.Record(s)
		}
		if victim.incarnation == inc {
			n.restart(int(victim.id))
		}
	}
}

// committedGrant says whether the entries (from, to] of m's log hold a Grant.
func committedGrant(m *node, from, to uint64) bool {
	first, err := m.disk.FirstIndex()
	if err != nil {
		return false
	}
	ents, err := m.disk.Entries(max(from+1, first), to+1, 1<<30)
	if err != nil {
		return false
	}
	_, _, ok := firstGrant(ents)
	return ok
}

// firstGrant is the index of the first of ents that carries a Grant, and
// that Grant's key.
func firstGrant(ents []*raftpb.Entry) (uint64, string, bool) {
	for _, e := range ents {
		if e.GetType() != raftpb.EntryType_EntryNormal || len(e.GetData()) == 0 {
			continue
		}
		envs, err := fsm.DecodeBatch(e.GetData())
		if err != nil {
			continue
		}
		for _, env := range envs {
			if env.Cmd.Op == fsm.OpGrant {
				return e.GetIndex(), env.Cmd.Key, true
			}
		}
	}
	return 0, "", false
}

package member

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// Rule 7's limit: a Grant this member proposed for a caller that left is a
// ghost only if no other leader can have shown the lock since. Here member
// 2 commits member 1's orphaned Grant in its own term and a linearizable
// get on it answers "held"; the caller, told "outcome unknown", may take
// that as its own lock. When leadership comes back to member 1, which
// applies the Grant before its term barrier, the lock must be left to its
// holder and its lease, not released.
func TestOrphanAnotherLeaderShowedHeldIsNotReleased(t *testing.T) {
	t.Run("rule", func(t *testing.T) {
		c, shown := orphanShownByAnotherLeader(t, "")
		c.check("another caller's try-acquire", c.call(1, Request{Handle: 3, Op: OpAcquire, Key: "k", Lease: time.Second}), "Held")
		c.submit(1, Request{Handle: 4, Op: OpGet, Key: "k"})
		if got := c.answer(1, 4); !got.Lock.Held || got.Lock.Token != shown {
			t.Fatalf("get on member 1: %+v, want held by %d", got, shown)
		}
		if n := counted(c.cores[1], GhostReleases); n != 0 {
			t.Fatalf("member 1 proposed %d ghost releases of a lock member 2 showed held", n)
		}
		if n := counted(c.cores[1], OrphanGrantsApplied); n != 1 {
			t.Fatalf("member 1 counted %d orphaned grants applied, want 1", n)
		}
	})
	t.Run("planted_bug", func(t *testing.T) {
		c, _ := orphanShownByAnotherLeader(t, BugGhostAfterAnotherLeader)
		c.check("another caller's try-acquire", c.call(1, Request{Handle: 3, Op: OpAcquire, Key: "k", Lease: time.Second}), "token 2")
	})
}

// orphanShownByAnotherLeader plays steps 1 to 4 (with bug planted in every
// member) and checks what member 2 showed.
func orphanShownByAnotherLeader(t *testing.T, bug string) (c *testCluster, shown uint64) {
	c = newCluster(t, 3, func(cfg *Config) { cfg.Bug = bug })
	c.elect(1)

	// 1. Member 1 proposes Grant{k}; 2 and 3 store it, but their
	// acknowledgements never reach member 1.
	c.drop = func(m *raftpb.Message) bool {
		return m.GetTo() == 1 && m.GetType() == raftpb.MessageType_MsgAppResp
	}
	c.submit(1, Request{Handle: 1, Op: OpAcquire, Key: "k", Lease: time.Minute, Owner: "me"})
	grantIndex, _ := c.stores[1].LastIndex()
	for _, id := range []uint64{2, 3} {
		if last, _ := c.stores[id].LastIndex(); last != grantIndex {
			t.Fatalf("member %d stored up to %d, want the Grant at %d", id, last, grantIndex)
		}
	}
	// 2. The caller's connection breaks.
	c.cores[1].Abandon(1, "k", 0)
	c.settle()

	// 3. Member 2 leads the next term and commits the Grant; member 1
	// learns of the term (it steps down, orphaning the Grant) and stores
	// the new leader's entry, but never a commit index at or past the Grant.
	c.drop = func(m *raftpb.Message) bool {
		if m.GetTo() != 1 {
			return false
		}
		switch m.GetType() {
		case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat:
			return m.GetCommit() >= grantIndex
		}
		return false
	}
	term := c.cores[1].Status().Term
	timeoutNow := &raftpb.Message{Type: raftpb.MessageType_MsgTimeoutNow.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(term)}
	if err := c.cores[2].Step(timeoutNow); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if lead, self := c.cores[2].Leader(); !self || c.cores[2].CanDecide() != nil {
		t.Fatalf("member 2 does not lead past its barrier (leader %d)", lead)
	}
	if c.cores[1].Status().Commit >= grantIndex {
		t.Fatalf("member 1 learnt commit %d, at or past the Grant at %d", c.cores[1].Status().Commit, grantIndex)
	}
	c.submit(2, Request{Handle: 2, Op: OpGet, Key: "k"})
	got := c.answer(2, 2)
	if got.Err != nil || !got.Lock.Held || got.Lock.Owner != "me" {
		t.Fatalf("linearizable get on member 2: %+v, want held by owner me", got)
	}
	shown = got.Lock.Token

	// 4. Leadership comes back to member 1, whose log matches.
	c.drop = nil
	transfer := &raftpb.Message{Type: raftpb.MessageType_MsgTransferLeader.Enum(), From: new(uint64(1)), To: new(uint64(2))}
	if err := c.cores[2].Step(transfer); err != nil {
		t.Fatal(err)
	}
	c.settle()
	if _, self := c.cores[1].Leader(); !self || c.cores[1].CanDecide() != nil {
		t.Fatalf("member 1 does not lead again past its barrier: %+v", c.cores[1].Status())
	}

	return c, shown
}

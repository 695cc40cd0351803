package member

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// Rule guarded: a member follows any leader its peers elected, including
// one added while it was down. A voter restarted from a log that predates
// the change adding the leader (and started with --peers that do not name
// it) must take that leader's messages and catch up from them; refusing
// them leaves it behind for as long as that member leads.
func TestStaleMemberFollowsLeaderAddedWhileItWasDown(t *testing.T) {
	peers := map[uint64]string{1: "h1:1", 2: "h2:1", 3: "h3:1"}
	c := newCluster(t, 3, func(cfg *Config) { cfg.Peers = peers })
	c.elect(1)
	c.check("acquire", c.call(1, acquire(1, "a")), "token 1")
	c.down[3] = true // member 3 is down for maintenance
	c.join(4)
	c.check("add learner", c.call(1, change(2, AddLearner, 4)), "ok")
	c.waitFor("the learner to catch up", func() bool { return c.cores[4].Applied() == c.cores[1].Applied() })
	c.tick(c.ids...)
	c.check("promote", c.call(1, change(3, Promote, 4)), "ok")
	if _, err := c.cores[1].TransferLeader(4); err != nil {
		t.Fatal(err)
	}
	c.waitFor("member 4 to lead", func() bool { _, self := c.cores[4].Leader(); return self && c.cores[4].CanDecide() == nil })
	c.check("acquire on 4", c.call(4, acquire(4, "b")), "token 2")
	// Member 3 restarts from its own store and is reachable again.
	c.start(3)
	delete(c.down, 3)
	c.waitFor("member 3 to catch up with leader 4", func() bool {
		return c.cores[3].Applied() == c.cores[4].Applied()
	})
	if lead, _ := c.cores[3].Leader(); lead != 4 {
		t.Fatalf("member 3 follows %d, want 4", lead)
	}
	if _, ok := func() (Member, bool) { b, _ := c.cores[3].Book(); return b.Get(4) }(); !ok {
		t.Fatal("member 3 caught up but its address book does not know member 4")
	}
}

// Rule guarded: a removed member never takes part again, whatever it
// sends, even though members now accept raft messages from senders their
// log does not know yet.
func TestRemovedMemberStaysRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	c.down[3] = true // what it sends from now on is stepped by hand below
	c.check("remove 3", c.call(1, change(1, Remove, 3)), "ok")
	c.tick(c.ids...)
	for _, typ := range []raftpb.MessageType{raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgVote, raftpb.MsgPreVote} {
		m := &raftpb.Message{Type: typ.Enum(), From: new(uint64(3)), To: new(uint64(2)), Term: new(uint64(1 << 20))}
		if err := c.cores[2].Step(m); err == nil {
			t.Errorf("member 2 took %s from removed member 3", typ)
		}
	}
}

// Rule guarded: a sender a member does not know can only be a leader or a
// candidate it has not heard of yet; it never sent that sender a request,
// so a response (or a follower's request) from it is refused.
func TestUnknownSenderMayOnlyLeadOrCampaign(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	term := c.cores[1].Status().Term
	for _, typ := range []raftpb.MessageType{raftpb.MsgAppResp, raftpb.MsgHeartbeatResp, raftpb.MsgVoteResp,
		raftpb.MsgPreVoteResp, raftpb.MsgReadIndex, raftpb.MsgReadIndexResp, raftpb.MsgTransferLeader} {
		m := &raftpb.Message{Type: typ.Enum(), From: new(uint64(9)), To: new(uint64(1)), Term: new(term),
			Entries: []*raftpb.Entry{{Data: []byte("ctx")}}}
		if err := c.cores[1].Step(m); err == nil {
			t.Errorf("member 1 took %s from unknown member 9", typ)
		}
	}
}

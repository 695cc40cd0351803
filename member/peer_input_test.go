package member

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/fsm"
)

// Rule guarded: whatever configuration a snapshot from a peer names, the
// member does not panic. raft restores a snapshot's configuration one
// change at a time and panics ("unable to restore config ... removed all
// voters") on one with no voter left, such as a configuration that names
// this member only as a learner, or as a voter and a learner. A sender the
// log does not know may now send snapshots (mayStep), so such a frame
// needs no known id any more.
func TestStepSnapshotWithUnrestorableConfigDoesNotPanic(t *testing.T) {
	for _, tc := range []struct {
		what string
		cs   *raftpb.ConfState
	}{
		{"no voter, this member a learner", &raftpb.ConfState{Learners: []uint64{2}}},
		{"this member a voter and a learner", &raftpb.ConfState{Voters: []uint64{2}, Learners: []uint64{2}}},
		{"only a zero voter", &raftpb.ConfState{Voters: []uint64{0}, Learners: []uint64{2}}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c := newCluster(t, 3, nil)
			c.elect(1)
			term := c.cores[1].Status().Term
			for _, from := range []uint64{9, 1} { // unknown, then the leader's id
				m := &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(from), To: new(uint64(2)), Term: new(term + 1),
					Snapshot: &raftpb.Snapshot{Data: EncodeSnapshot(fsm.New().Snapshot(), Book{}), Metadata: &raftpb.SnapshotMetadata{
						Index: new(uint64(1000)), Term: new(term + 1), ConfState: tc.cs}}}
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("snapshot from %d with configuration %v: panic: %v", from, tc.cs, r)
						}
					}()
					if err := c.cores[2].Step(m); err == nil {
						t.Errorf("snapshot from %d with configuration %v was taken", from, tc.cs)
					}
				}()
			}
		})
	}
}

// Rule guarded: a snapshot frame whose data this member cannot decode is
// refused before raft takes it. Taken, it is stored (Ready.Snapshot) before
// it is applied; the apply then fails and stops the member, and every
// restart fails on the stored snapshot: one bad frame (now from any id the
// log does not know either) would leave a member unable to start.
func TestStepSnapshotWithUndecodableDataIsRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	term := c.cores[1].Status().Term
	m := &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(9)), To: new(uint64(2)), Term: new(term + 1),
		Snapshot: &raftpb.Snapshot{Data: []byte("RLM\x01junk"), Metadata: &raftpb.SnapshotMetadata{
			Index: new(uint64(1000)), Term: new(term + 1), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}}
	if err := c.cores[2].Step(m); err == nil {
		t.Error("a snapshot whose data does not decode was taken")
	}
	if n := counted(c.cores[2], SnapshotsCorrupt); n != 1 {
		t.Errorf("raftlock_snapshots_corrupt_total is %v after one undecodable snapshot, want 1", n)
	}
	core := c.cores[2]
	if core.HasReady() {
		rd := core.Ready(c.now)
		if rd.Snapshot != nil {
			if err := c.stores[2].ApplySnapshot(rd.Snapshot); err != nil {
				t.Fatal(err)
			}
		}
		if err := core.Advance(c.now); err != nil {
			t.Errorf("member 2 stopped: %v", err)
		}
	}
	if _, err := New(c.cfgs[2], c.now); err != nil {
		t.Fatalf("member 2 cannot restart from its store: %v", err)
	}
}

// Rule guarded: whatever entries an append from a peer carries, the member
// does not panic. raft v3.7 does not check that an append's entries follow
// its (index, term) one by one: entries that do not (here one that
// restarts at index 1) reach its conflict check, which panics on a
// "conflict with committed entry". Since any id the log does not know may
// send appends (mayStep), such a frame needs no known id. Entries that do
// follow start past the commit index, which raft checks first, so they
// can never conflict with a committed entry.
func TestStepAppendWithInconsistentEntriesDoesNotPanic(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	c.check("acquire", c.call(1, acquire(1, "a")), "token 1")
	st := c.cores[2].Status()
	last, _ := c.stores[2].LastIndex()
	lastTerm, _ := c.stores[2].Term(last)
	for _, tc := range []struct {
		what string
		ents []*raftpb.Entry
	}{
		{"an entry at index 1", []*raftpb.Entry{{Index: new(uint64(1)), Term: new(st.Term + 1)}}},
		{"a gap", []*raftpb.Entry{{Index: new(last + 1), Term: new(st.Term + 1)}, {Index: new(last + 3), Term: new(st.Term + 1)}}},
		{"a term past the leader's", []*raftpb.Entry{{Index: new(last + 1), Term: new(st.Term + 5)}}},
	} {
		m := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(9)), To: new(uint64(2)), Term: new(st.Term + 1),
			Index: new(last), LogTerm: new(lastTerm), Commit: new(st.Commit), Entries: tc.ents}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("append with %s: panic: %v", tc.what, r)
				}
			}()
			if err := c.cores[2].Step(m); err == nil {
				t.Errorf("append with %s was taken", tc.what)
			}
			for c.cores[2].HasReady() {
				c.cores[2].Ready(c.now)
				c.cores[2].Advance(c.now)
			}
		}()
	}
}

// The planted twin of the three tests above: with no-peer-input-checks
// Step hands raft what they refuse, and raft panics (an append whose
// entries restart at index 1, a configuration it cannot restore), takes a
// joint configuration this cluster never makes, or stores a snapshot the
// member cannot apply and then cannot start from. Without the bug the
// same frames are refused, so a harness that catches the twin catches a
// member that lost these checks.
func TestBugNoPeerInputChecksLetsPeerFramesThrough(t *testing.T) {
	snap := func(term uint64, data []byte, cs *raftpb.ConfState) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(9)), To: new(uint64(2)), Term: new(term + 1),
			Snapshot: &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{
				Index: new(uint64(1000)), Term: new(term + 1), ConfState: cs}}}
	}
	good := EncodeSnapshot(fsm.New().Snapshot(), Book{})
	for _, tc := range []struct {
		what  string
		frame func(c *testCluster) *raftpb.Message
		// broken is what the member does with the bug: "panic", "taken"
		// (Step accepts a frame it must refuse), "unstartable" (taken,
		// and the member cannot restart from its store).
		broken string
	}{
		{"append with an entry at index 1", func(c *testCluster) *raftpb.Message {
			st := c.cores[2].Status()
			last, _ := c.stores[2].LastIndex()
			lastTerm, _ := c.stores[2].Term(last)
			return &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(9)), To: new(uint64(2)), Term: new(st.Term + 1),
				Index: new(last), LogTerm: new(lastTerm), Commit: new(st.Commit),
				Entries: []*raftpb.Entry{{Index: new(uint64(1)), Term: new(st.Term + 1)}}}
		}, "panic"},
		{"snapshot naming this member only as a learner", func(c *testCluster) *raftpb.Message {
			return snap(c.cores[2].Status().Term, good, &raftpb.ConfState{Learners: []uint64{2}})
		}, "panic"},
		{"snapshot naming this member a voter and a learner", func(c *testCluster) *raftpb.Message {
			return snap(c.cores[2].Status().Term, good, &raftpb.ConfState{Voters: []uint64{2}, Learners: []uint64{2}})
		}, "panic"},
		{"snapshot with a zero voter", func(c *testCluster) *raftpb.Message {
			return snap(c.cores[2].Status().Term, good, &raftpb.ConfState{Voters: []uint64{0}, Learners: []uint64{2}})
		}, "panic"},
		{"snapshot with a joint configuration", func(c *testCluster) *raftpb.Message {
			return snap(c.cores[2].Status().Term, good, &raftpb.ConfState{Voters: []uint64{1, 2, 3}, VotersOutgoing: []uint64{1, 2}})
		}, "taken"},
		{"snapshot whose data does not decode", func(c *testCluster) *raftpb.Message {
			return snap(c.cores[2].Status().Term, []byte("RLM\x01junk"), &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
		}, "unstartable"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			for _, bug := range []string{"", BugNoPeerInputChecks} {
				c := newCluster(t, 3, func(cfg *Config) { cfg.Bug = bug })
				c.elect(1)
				c.check("acquire", c.call(1, acquire(1, "a")), "token 1")
				got := stepOutcome(t, c, tc.frame(c))
				want := "refused"
				if bug != "" {
					want = tc.broken
				}
				if got != want {
					t.Errorf("bug %q: the frame was %s, want %s", bug, got, want)
				}
			}
		})
	}
}

// stepOutcome hands member 2 m and does its Readies: "refused" (Step
// returned an error), "panic", "unstartable" (taken, and member 2 stopped
// or cannot start again from its store) or "taken".
func stepOutcome(t *testing.T, c *testCluster, m *raftpb.Message) (outcome string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Logf("panic: %v", r)
			outcome = "panic"
		}
	}()
	if err := c.cores[2].Step(m); err != nil {
		return "refused"
	}
	core := c.cores[2]
	for core.HasReady() {
		if err := (clusterCarrier{c, 2}).Save(core.Ready(c.now)); err != nil {
			t.Fatal(err)
		}
		if err := core.Advance(c.now); err != nil {
			return "unstartable"
		}
	}
	if _, err := New(c.cfgs[2], c.now); err != nil {
		return "unstartable"
	}
	return "taken"
}

package member

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FuzzStepUnknownSender: whatever a sender the log does not know sends, at
// any term, a member does not panic (it may follow it: raft trusts
// leaders at its term and above).
func FuzzStepUnknownSender(f *testing.F) {
	for _, typ := range []raftpb.MessageType{raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap, raftpb.MsgVote, raftpb.MsgPreVote, raftpb.MsgTimeoutNow} {
		b, _ := proto.Marshal(&raftpb.Message{Type: typ.Enum(), Term: new(uint64(3)), Index: new(uint64(2)), LogTerm: new(uint64(2)), Commit: new(uint64(2)),
			Entries:  []*raftpb.Entry{{Index: new(uint64(3)), Term: new(uint64(3))}},
			Snapshot: &raftpb.Snapshot{Data: EncodeSnapshot(nil, Book{}), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(3)), ConfState: &raftpb.ConfState{Voters: []uint64{2}}}}})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, c := fuzzedMessage(t, data)
		if m == nil {
			return
		}
		c.check("acquire", c.call(1, acquire(1, "a")), "token 1")
		m.From, m.To = new(uint64(9)), new(uint64(2))
		core := c.cores[2]
		_ = core.Step(m)
		for i := 0; i < 3 && core.HasReady(); i++ {
			rd := core.Ready(c.now)
			ms := c.stores[2]
			if rd.Snapshot != nil {
				ms.ApplySnapshot(rd.Snapshot)
			}
			if rd.HardState != nil {
				ms.SetHardState(rd.HardState)
			}
			ms.Append(rd.Entries)
			core.Advance(c.now)
		}
	})
}

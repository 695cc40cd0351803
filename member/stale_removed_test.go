package member

import (
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// Rule guarded: a removed member takes no further part, restarted or not.
// A member whose own snapshot covers its removal has no removal entry left
// to apply when it restarts: it must start removed (so its driver stops
// it), not sit outside the configuration forever.
func TestMemberRestartedFromSnapshotCoveringItsRemovalIsRemoved(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEvery = 1 })
	// As the transport does, a member that applied 3's removal takes no
	// more messages from it.
	c.drop = func(m *raftpb.Message) bool {
		return m.GetFrom() == 3 && slices.Contains(c.cores[m.GetTo()].book.Removed, 3)
	}
	c.elect(1)
	c.check("acquire", c.call(1, acquire(1, "a")), "token 1")
	c.check("remove 3", c.call(1, change(2, Remove, 3)), "ok")
	c.waitFor("member 3 to apply its removal", func() bool { return c.cores[3].Removed() })
	c.down[3] = true
	if snap, _ := c.stores[3].Snapshot(); confHas(snap.GetMetadata().GetConfState(), 3) {
		t.Fatalf("setup: member 3's snapshot at %d does not cover its removal", snap.GetMetadata().GetIndex())
	}
	c.start(3)
	if !c.cores[3].Removed() {
		t.Fatal("member 3 restarted from a snapshot that covers its removal, and does not know it was removed")
	}

	// A joiner starts outside the configuration too, but was never removed.
	c.join(4)
	if c.cores[4].Removed() {
		t.Fatal("a joining member starts as removed")
	}
}

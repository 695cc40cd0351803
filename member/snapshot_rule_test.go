package member

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/fsm"
)

// A snapshot waits until the log since the last one is as big as the
// table's encoding, besides SnapshotEvery entries: a big table is not
// written again every few entries (each snapshot costs at most the log it
// retires). SnapshotByEntries takes one every SnapshotEvery entries.
func TestSnapshotWaitsForALogAsBigAsTheTable(t *testing.T) {
	for _, byEntries := range []bool{false, true} {
		t.Run(fmt.Sprintf("by_entries=%v", byEntries), func(t *testing.T) {
			c := newCluster(t, 1, func(cfg *Config) { cfg.SnapshotEvery, cfg.SnapshotByEntries = 5, byEntries })
			c.elect(1)
			key := strings.Repeat("k", 200)
			// 6,000 locks of 200-byte keys: a table of about 1.3 MB (over
			// smallTable), made by 6,000 entries of about the same size.
			for i := range 6000 {
				c.call(1, Request{Handle: uint64(10000 + i), Op: OpAcquire, Key: fmt.Sprintf("%s%04d", key, i), Lease: time.Hour})
			}
			last := c.cores[1].lastSnap
			// 20 entries of small keys: 20 x ~30 bytes, far below the table.
			for i := range 20 {
				c.call(1, Request{Handle: uint64(20000 + i), Op: OpAcquire, Key: fmt.Sprintf("s%d", i), Lease: time.Hour})
			}
			took := c.cores[1].lastSnap > last
			if took != byEntries {
				t.Fatalf("a snapshot after 20 small entries over a 1.3 MB table: %v, want %v", took, byEntries)
			}
		})
	}
}

// The table Step decoded to check a snapshot is the one the apply
// installs, although raft hands the apply a copy of the bytes; a snapshot
// at another index or term, or with other bytes, is decoded afresh.
func TestSnapshotCheckedByStepIsNotDecodedAgain(t *testing.T) {
	m := fsm.New()
	m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "k", LeaseMS: 1000})
	snap := &raftpb.Snapshot{Data: EncodeSnapshot(m.Snapshot(), Book{}), Metadata: &raftpb.SnapshotMetadata{
		Index: new(uint64(10)), Term: new(uint64(2)), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
	d, err := checkSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	c := &Core{checked: d}
	got, _, _, err := c.decodeSnapshot(proto.Clone(snap).(*raftpb.Snapshot))
	if err != nil || got != d.m {
		t.Fatalf("the apply decoded the snapshot Step had decoded again (%v)", err)
	}
	if c.checked != nil {
		t.Fatal("the decoded table is kept after its install")
	}
	other := proto.Clone(snap).(*raftpb.Snapshot)
	other.Metadata.Term = new(uint64(3))
	c.checked = d
	if got, _, _, _ := c.decodeSnapshot(other); got == d.m {
		t.Fatal("a snapshot at another term took the table decoded for term 2")
	}
}

// Members that apply the same entries do not snapshot a big table at the
// same index: each one's first snapshot of it waits its ID's share of the
// table's log, so member 1 goes first, then 2, then 3, an eighth of the
// table's log apart, and none encodes the table while another does.
func TestMembersSnapshotABigTableAtStaggeredIndexes(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEvery = 5 })
	c.elect(1)
	key := strings.Repeat("k", 200)
	for i := range 6000 { // a table of about 1.3 MB
		c.call(1, Request{Handle: uint64(10000 + i), Op: OpAcquire, Key: fmt.Sprintf("%s%04d", key, i), Lease: time.Hour})
	}
	first := map[uint64]uint64{} // member: index of its first snapshot of the big table
	for i := 0; len(first) < 3; i++ {
		if i == 20000 {
			t.Fatalf("after %d more acquires only members %v snapshotted the big table", i, first)
		}
		// Churn beside the table: a lock taken with a big key, then let go.
		c.submit(1, Request{Handle: uint64(100000 + i), Op: OpAcquire, Key: key + "-churn", Lease: time.Hour})
		token := c.answer(1, uint64(100000+i)).Token
		c.call(1, Request{Handle: uint64(200000 + i), Op: OpRelease, Key: key + "-churn", Token: token})
		for id, core := range c.cores {
			if _, seen := first[id]; !seen && core.staggered {
				first[id] = core.lastSnap
			}
		}
	}
	t.Logf("first snapshots of the big table at %v", first)
	if !(first[1] < first[2] && first[2] < first[3]) {
		t.Fatalf("first snapshots of the big table at %v, want member 1 before 2 before 3", first)
	}
	// 1/8 of a table of about 1.3 MB is 160 KB, some 700 entries here.
	if gap := min(first[2]-first[1], first[3]-first[2]); gap < 300 {
		t.Fatalf("first snapshots of the big table at %v: %d entries apart, want hundreds", first, gap)
	}
}

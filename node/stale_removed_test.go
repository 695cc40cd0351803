package node_test

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/logstore"
)

// Rule guarded: a removed member takes no further part. One whose stored
// snapshot already covers its removal stops at start with ErrRemoved, as
// it does when it applies its removal.
func TestMemberWhoseSnapshotCoversItsRemovalStops(t *testing.T) {
	peers := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		peers[id] = a
	}
	book := member.NewBook(peers)
	book.Members = book.Members[:2]
	book.Removed = []uint64{3}
	dir := filepath.Join(t.TempDir(), "data-3")
	// The store of member 3 after it snapshotted at index 7, where its
	// removal had applied (seeded as a restore seeds a snapshot).
	initial := logstore.InitialSnapshot([]uint64{1, 2}, member.EncodeSnapshot(fsm.New().Snapshot(), book))
	initial.Metadata.Index, initial.Metadata.Term = new(uint64(7)), new(uint64(2))
	s, err := logstore.OpenSeeded(dir, vfs.Default, initial, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	n, err := node.New(node.Config{Config: member.Config{ID: 3, Peers: peers, Logger: slog.New(slog.DiscardHandler)}, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the removed member keeps running")
	}
	if err := n.Err(); !errors.Is(err, node.ErrRemoved) {
		t.Fatalf("stopped with %v, want ErrRemoved", err)
	}
}

package node

import (
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node/logstore"
)

// What the external tests (package node_test, which run clusters through
// node/nodetest) need from inside the package. Only test binaries
// see these.

// Inspect runs f on n's loop goroutine; false when the loop has ended.
func Inspect(n *Node, f func(*member.Core)) bool { return n.inspect(f) }

// StorageFirstIndex is the first index in n's raft log store.
func (n *Node) StorageFirstIndex() (uint64, error) { return n.storage.FirstIndex() }

// ConfigOf returns n's config with the defaults filled in.
func ConfigOf(n *Node) Config { return n.cfg }

// StartSingle runs a one-member node on an in-memory pebble store (as
// wrap wraps it), closed when the test ends.
func StartSingle(t *testing.T, cfg Config, wrap func(*logstore.Disk) logstore.Store) *Node {
	t.Helper()
	d, err := logstore.OpenFS("/d", vfs.NewMem(), []uint64{1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ID, cfg.Peers, cfg.Storage = 1, map[uint64]string{1: freeport.For(t)}, wrap(d)
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		n.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

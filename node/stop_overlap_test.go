package node_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/testcluster"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/logstore"
)

// Close while a Ready's write is held: Close waits for the write (the
// store closes only after it), the held call ends granted or with an
// unknown outcome (its entry is stored), and a call decided meanwhile,
// never handed to raft, ends as not having happened: never granted, never
// "outcome unknown".
func TestCloseWaitsForTheWriteInFlight(t *testing.T) {
	dir := t.TempDir()
	peer, _ := freeport.Addr()
	disk, err := logstore.Open(filepath.Join(dir, "raft"), []uint64{1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Disk: disk, blocked: make(chan struct{}), gate: make(chan struct{})}
	n, err := node.New(node.Config{ID: 1, Peers: map[uint64]string{1: peer}, DataDir: dir, Storage: g})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	testcluster.WaitFor(t, 10*time.Second, "a leader that grants", func() bool {
		_, err := n.Acquire(ctx, "warm", time.Minute, 0, 0)
		return err == nil
	})
	g.armed.Store(true)
	first := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx, "a", time.Minute, 0, 0); first <- err }()
	<-g.blocked
	second := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx, "b", time.Minute, 0, 0); second <- err }()
	// "b" is decided by the loop while the write is held: proposed, in
	// the core's queue for the next Ready, beside "a" in the held one.
	testcluster.WaitFor(t, 10*time.Second, "the second acquire decided", func() bool {
		inflight := 0
		node.Inspect(n, func(c *member.Core) { inflight = c.InFlight() })
		return inflight >= 2
	})
	closed := make(chan struct{})
	go func() { n.Close(); close(closed) }()
	close(g.gate)
	<-closed
	if err := <-first; err != nil && !errors.Is(err, member.ErrOutcomeUnknown) {
		t.Errorf("first acquire (stored by the held write): %v, want granted or an unknown outcome", err)
	}
	if err := <-second; err == nil || errors.Is(err, member.ErrOutcomeUnknown) {
		t.Errorf("second acquire, never handed to raft: %v, want stopped or unavailable", err)
	}
}

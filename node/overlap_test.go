package node_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/logstore"
	"github.com/raftlock/raftlock/node/nodetest"
)

// gatedStore holds a Save that carries entries until the test opens the
// gate: a write that takes as long as the test likes.
type gatedStore struct {
	*logstore.Disk
	armed   atomic.Bool
	blocked chan struct{} // a Save is waiting at the gate
	gate    chan struct{}
}

func (g *gatedStore) Save(hs *raftpb.HardState, entries []*raftpb.Entry, snap *raftpb.Snapshot, sync bool) error {
	if len(entries) > 0 && g.armed.CompareAndSwap(true, false) {
		g.blocked <- struct{}{}
		<-g.gate
	}
	return g.Disk.Save(hs, entries, snap, sync)
}

// startGated starts a single member on a gatedStore and waits until it
// grants: a new leader answers Unavailable until an entry of its term
// applied. The member closes when t ends, the gate opened first, so that a
// failing test never leaves the loop waiting at it.
func startGated(t *testing.T, ctx context.Context) (*node.Node, *gatedStore, func()) {
	t.Helper()
	return startGatedWith(t, ctx, func(*node.Config) {})
}

// startGatedWith is startGated with the config as mod leaves it.
func startGatedWith(t *testing.T, ctx context.Context, mod func(*node.Config)) (*node.Node, *gatedStore, func()) {
	t.Helper()
	dir := t.TempDir()
	peer := freeport.For(t)
	disk, err := logstore.Open(filepath.Join(dir, "raft"), []uint64{1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Disk: disk, blocked: make(chan struct{}), gate: make(chan struct{})}
	cfg := node.Config{Config: member.Config{ID: 1, Peers: map[uint64]string{1: peer}}, DataDir: dir, Storage: g}
	mod(&cfg)
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	open := sync.OnceFunc(func() { close(g.gate) })
	t.Cleanup(func() { open(); n.Close() })
	nodetest.WaitFor(t, 10*time.Second, "a leader that grants", func() bool {
		_, err := n.Acquire(ctx, "warm", time.Minute, 0, 0)
		return err == nil
	})
	return n, g, open
}

// acquireAsync acquires key on n in the background; its answer comes on
// the channel returned.
func acquireAsync(ctx context.Context, n *node.Node, key string) <-chan error {
	answer := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx, key, time.Minute, 0, 0); answer <- err }()
	return answer
}

// holdAcquire arms g's gate and acquires key on n in the background; it
// returns once the acquire's write is held at the gate, with the channel
// its answer comes on.
func (g *gatedStore) holdAcquire(t *testing.T, ctx context.Context, n *node.Node, key string) <-chan error {
	t.Helper()
	g.armed.Store(true)
	answer := acquireAsync(ctx, n, key)
	select {
	case <-g.blocked:
	case <-ctx.Done():
		t.Fatalf("the write of the acquire of %q never came", key)
	}
	return answer
}

// While a Ready's write is being synced the loop goes on taking calls:
// an acquire that arrives during the write is decided then, and rides in
// the next entry, while the first acquire's answer waits for its write.
func TestCallsAreTakenWhileAWriteSyncs(t *testing.T) {
	ctx := nodetest.Context(t, 20*time.Second)
	n, g, open := startGated(t, ctx)
	first := g.holdAcquire(t, ctx, n, "a")
	// The write is held. The loop still answers: a call that needs only
	// the loop returns, and a second acquire is decided.
	second := acquireAsync(ctx, n, "b")
	applied := make(chan uint64, 1)
	go func() { st, _ := n.Status(ctx); applied <- st.Applied }()
	select {
	case <-applied:
	case <-ctx.Done():
		t.Fatal("the loop took no call while a write was being synced")
	}
	select {
	case err := <-first:
		t.Fatalf("the first acquire was answered (%v) before its write returned", err)
	default:
	}
	open()
	for name, c := range map[string]<-chan error{"first": first, "second": second} {
		if err := <-c; err != nil {
			t.Fatalf("%s acquire: %v", name, err)
		}
	}
}

// Without the write overlap the loop waits for each write: a health check
// or status read behind a write that does not return ends with its
// context (unhealthy, for /healthz) instead of hanging, and answers once
// the write returned.
func TestHealthAndStatusEndWithTheirContextBehindAStuckWrite(t *testing.T) {
	ctx := nodetest.Context(t, 20*time.Second)
	n, g, open := startGatedWith(t, ctx, func(cfg *node.Config) { cfg.NoWriteOverlap = true })
	acquired := g.holdAcquire(t, ctx, n, "a")
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if err := n.Healthy(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("health behind a stuck write: %v, want the context's deadline", err)
	}
	if _, err := n.Status(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("status behind a stuck write: %v, want the context's deadline", err)
	}
	open()
	if err := <-acquired; err != nil {
		t.Fatalf("the acquire behind the write: %v", err)
	}
	if err := n.Healthy(ctx); err != nil {
		t.Fatalf("health once the write returned: %v", err)
	}
}

// Close while a Ready's write is held: Close waits for the write (the
// store closes only after it), the held call ends granted or with an
// unknown outcome (its entry is stored), and a call decided meanwhile,
// never handed to raft, ends as not having happened: never granted, never
// "outcome unknown".
func TestCloseWaitsForTheWriteInFlight(t *testing.T) {
	ctx := nodetest.Context(t, 20*time.Second)
	n, g, open := startGated(t, ctx)
	first := g.holdAcquire(t, ctx, n, "a")
	second := acquireAsync(ctx, n, "b")
	// "b" is decided by the loop while the write is held: proposed, in
	// the core's queue for the next Ready, beside "a" in the held one.
	nodetest.WaitFor(t, 10*time.Second, "the second acquire decided", func() bool {
		inflight := 0
		node.Inspect(n, func(c *member.Core) { inflight = c.InFlight() })
		return inflight >= 2
	})
	closed := make(chan struct{})
	go func() { n.Close(); close(closed) }()
	open()
	<-closed
	if err := <-first; err != nil && !errors.Is(err, member.ErrOutcomeUnknown) {
		t.Errorf("first acquire (stored by the held write): %v, want granted or an unknown outcome", err)
	}
	if err := <-second; err == nil || errors.Is(err, member.ErrOutcomeUnknown) {
		t.Errorf("second acquire, never handed to raft: %v, want stopped or unavailable", err)
	}
}

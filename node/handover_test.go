package node_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
)

// A handover that leaves this member leading (asked to transfer to
// itself, or the transfer failed) must leave it taking calls: before this
// rule `leader transfer --to <the leader>` left the leader draining, and
// every call ended Unavailable until the next election.
func TestHandOverToItselfKeepsTakingCalls(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	l := c.WaitLeader()
	ctx := ctxT(t, 20*time.Second)
	to, err := l.HandOver(ctx, l.ID())
	if err != nil || to != l.ID() {
		t.Fatalf("HandOver to itself = %d, %v; want %d, nil", to, err, l.ID())
	}
	if _, err := l.Acquire(ctx, "after-handover", time.Minute, 0, 0); err != nil {
		t.Fatalf("acquire after a handover to itself: %v", err)
	}
}

// A handover whose context ended while calls were in flight must neither
// transfer nor leave the leader draining.
func TestHandOverWithExpiredContextKeepsLeading(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	l := c.WaitLeader()
	expired := ctxT(t, time.Nanosecond)
	<-expired.Done()
	if _, err := l.HandOver(expired, 0); err == nil {
		t.Fatal("HandOver with an expired context succeeded")
	}
	ctx := ctxT(t, 20*time.Second)
	if _, err := l.Acquire(ctx, "after-expired-handover", time.Minute, 0, 0); err != nil {
		t.Fatalf("acquire after an abandoned handover: %v", err)
	}
	if lead, err := c.Leader(ctx); err != nil || lead != l.ID() {
		t.Fatalf("leader after an abandoned handover = %d, %v; want %d", lead, err, l.ID())
	}
}

// A single member has nobody to hand leadership to: a clean stop neither
// tries nor warns that the handover failed, and still answers the calls
// it proposed.
func TestShutdownOfASingleMemberTriesNoHandover(t *testing.T) {
	var logs lockedBuffer
	c := nodetest.New(t, 1, func(cfg *node.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	l := c.WaitLeader()
	ctx := ctxT(t, 20*time.Second)
	if _, err := l.Acquire(ctx, "before-stop", time.Minute, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "handing leadership over") {
			t.Errorf("a single member's clean stop logged: %s", line)
		}
	}
}

// lockedBuffer is a bytes.Buffer the member's goroutines may log to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

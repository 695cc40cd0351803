package node_test

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testcluster"
)

// A handover that leaves this member leading (asked to transfer to
// itself, or the transfer failed) must leave it taking calls: before this
// rule `leader transfer --to <the leader>` left the leader draining, and
// every call ended Unavailable until the next election.
func TestHandOverToItselfKeepsTakingCalls(t *testing.T) {
	c := testcluster.New(t, 3, nil)
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
	c := testcluster.New(t, 3, nil)
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

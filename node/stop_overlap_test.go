package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
)

// Close while a Ready's write is held: Close waits for the write (the
// store closes only after it), the held call ends granted or with an
// unknown outcome (its entry is stored), and a call decided meanwhile,
// never handed to raft, ends as not having happened: never granted, never
// "outcome unknown".
func TestCloseWaitsForTheWriteInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, g, open := startGated(t, ctx)
	g.armed.Store(true)
	first := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx, "a", time.Minute, 0, 0); first <- err }()
	<-g.blocked
	second := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx, "b", time.Minute, 0, 0); second <- err }()
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

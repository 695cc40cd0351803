package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node/nodetest"
)

// KeepAlive renews a lock (more of the lease is left than the acquire
// alone could leave), and returns nil when its context ends with the lock
// still held.
func TestKeepAliveHoldsALockPastItsLease(t *testing.T) {
	_, _, cl, ctx := startTunedWithClient(t, rareElections)
	g := acquire(t, ctx, cl, "k", renewedLease)
	granted := time.Now()
	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cl.KeepAlive(kctx, "k", g.Token, renewedLease) }()
	nodetest.WaitFor(t, time.Minute, "a renewal", func() bool {
		select {
		case err := <-done:
			t.Fatalf("KeepAlive ended with %v while its context lasted", err)
		default:
		}
		return renewedSince(t, ctx, cl, "k", g.Token, granted)
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("KeepAlive ended with %v, want nil at its context's end", err)
	}
	info, err := cl.Get(ctx, "k")
	if err != nil || !info.Held || info.Token != g.Token {
		t.Fatalf("after KeepAlive: %+v, %v; want held with token %d", info, err, g.Token)
	}
}

// KeepAlive returns the moment the lock is lost: here an operator forces
// its release, and the next renewal is answered not-held.
func TestKeepAliveReturnsWhenTheLockIsLost(t *testing.T) {
	_, _, cl, ctx := startWithClient(t)
	const lease = 3 * time.Second
	g := acquire(t, ctx, cl, "k", lease)
	done := make(chan error, 1)
	go func() { done <- cl.KeepAlive(ctx, "k", g.Token, lease) }()
	forced := time.Now()
	if _, err := cl.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("KeepAlive of a lost lock ended with %v, want ErrNotFound", err)
		}
		// The next renewal (every lease/3) finds it lost.
		if took := time.Since(forced); took > lease/3+2*time.Second {
			t.Fatalf("KeepAlive noticed the loss after %v", took)
		}
	case <-ctx.Done():
		t.Fatal("KeepAlive did not notice the lock was lost")
	}
}

// KeepAlive checks its arguments before it sends anything.
func TestKeepAliveRefusesBadArguments(t *testing.T) {
	cl := nodetest.Client(t, "127.0.0.1:1")
	var inv *client.InvalidArgumentError
	if err := cl.KeepAlive(context.Background(), "k", 1, time.Millisecond); !errors.As(err, &inv) {
		t.Fatalf("a 1ms lease: %v, want an InvalidArgumentError", err)
	}
}

package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
)

// A call the member answers Overloaded is retried with backoff within the
// caller's deadline: it fails as ErrOverloaded when the limit holds until
// the deadline, and succeeds once the limit frees up in time.
func TestOverloadedIsRetriedUntilTheDeadline(t *testing.T) {
	c := nodetest.New(t, 1, func(cfg *node.Config) { cfg.Limits = node.Limits{MaxKeys: 1} })
	if _, err := c.Leader(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, c.Endpoints()...)
	tok, err := cl.Acquire(ctxT(t, 5*time.Second), "a", 10*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err = cl.Acquire(ctxT(t, 300*time.Millisecond), "b", 10*time.Second, 0)
	if !errors.Is(err, client.ErrOverloaded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire past --max-keys: got %v, want ErrOverloaded at the deadline", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("gave up after %v, before its deadline", took)
	}

	done := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(ctxT(t, 5*time.Second), "c", 10*time.Second, 0)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // "c" is answered overloaded meanwhile
	if err := cl.Release(ctxT(t, 5*time.Second), "a", tok.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("acquire retried after the key was released: %v", err)
	}
}

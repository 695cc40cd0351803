package client_test

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/watchnet"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// A member that is stopping sends a goaway, then still answers a request
// the client had already sent: the client gets that answer (never an
// unknown outcome), sends nothing more on that connection, hangs up once
// it is idle, and sends its next call over a new connection.
func TestGoAwayEndsTheConnectionWithoutLosingAnAnswer(t *testing.T) {
	var accepted, hungUp atomic.Int32
	addr := fakeMember(t, func(n int32, c net.Conn, next func() (wire.Request, error)) {
		accepted.Store(n)
		goneAway := false
		for {
			req, err := next()
			if err != nil {
				if goneAway {
					hungUp.Add(1)
				}
				return
			}
			if goneAway {
				t.Errorf("request %v sent after the goaway", req.Op)
			}
			resp := &wire.Response{ID: req.ID, Op: wire.OpReleased}
			if req.Op == wire.OpAcquire {
				resp = &wire.Response{ID: req.ID, Op: wire.OpGranted, Token: 7, LeaseMS: 1000}
			}
			if n == 1 {
				c.Write(wire.AppendResponse(nil, &wire.Response{ID: wire.GoAwayID, Op: wire.OpUnavailable, Reason: "member stopping"}))
				goneAway = true
				time.Sleep(50 * time.Millisecond) // the answer comes after the goaway
			}
			c.Write(wire.AppendResponse(nil, resp))
		}
	})
	cl := nodetest.Client(t, addr)
	ctx := nodetest.Context(t, 5*time.Second)
	g, err := cl.Acquire(ctx, "k", time.Second, 0)
	if err != nil || g.Token != 7 {
		t.Fatalf("acquire answered after a goaway: %+v, %v", g, err)
	}
	if err := cl.Release(ctx, "k", 7); err != nil {
		t.Fatalf("release after the goaway: %v", err)
	}
	if n := accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (a new one after the goaway)", n)
	}
	deadline := time.Now().Add(2 * time.Second)
	for hungUp.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if hungUp.Load() != 1 {
		t.Fatal("the client kept the connection the member asked it to leave")
	}
}

// A call that races a member's Shutdown (its connection accepted before
// Shutdown began, its greeting answered after) succeeds: the member's
// greeting comes first and its goaway after, so the call is answered by
// that member or retried on another, never failed as a ProtocolError, which
// is what a goaway read in place of the greeting used to make it.
func TestCallRacingAShutdownIsNotAProtocolError(t *testing.T) {
	c, leader := startCluster(t, 1)
	// A second client port on the leader, the one that shuts down; the
	// cluster's own stays up as the member to retry on.
	s := server.New(c.Node(leader))
	ln := watchnet.Serve(t, s, watchnet.Held)
	cl := nodetest.Client(t, ln.Addr().String(), c.Clients[leader]) // the stopping member first

	ctx := nodetest.Context(t, 10*time.Second)
	acquired := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(ctx, "k", time.Second, 0)
		acquired <- err
	}()
	watchnet.Wait(t, ln.Reading, "the member to read the client's greeting")

	shutdown, sctx := ln.BeginShutdown(t, s)
	ln.Release() // now the member may read the greeting and answer it

	select {
	case err := <-acquired:
		if pe := (*client.ProtocolError)(nil); errors.As(err, &pe) {
			t.Fatalf("a call racing a shutdown failed as a protocol error: %v", err)
		}
		if err != nil {
			t.Fatalf("a call racing a shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return")
	}
	// The client got the goaway and left, so Shutdown need not wait out
	// its deadline.
	select {
	case <-shutdown:
		if sctx.Err() != nil {
			t.Fatal("the client stayed on the stopping member until Shutdown's deadline")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/freeport"
)

// A relay sends the call in an envelope naming the identity, follows a
// redirect, and hands back the answer under the call's own id.
func TestRelayForwardsAndFollowsARedirect(t *testing.T) {
	leader := fakeMember(t, func(_ int32, c net.Conn, next func() (wire.Request, error)) {
		for {
			req, err := next()
			if err != nil {
				return
			}
			resp := wire.Response{ID: req.ID, Op: wire.OpGranted, Token: 9, LeaseMS: req.LeaseMS}
			if !req.Forwarded || req.Behalf != "alice" || req.Key != "k" {
				resp = wire.Response{ID: req.ID, Op: wire.OpError, Reason: "not relayed as sent"}
			}
			c.Write(wire.AppendResponse(nil, &resp))
		}
	})
	follower := fakeMember(t, func(_ int32, c net.Conn, next func() (wire.Request, error)) {
		req, err := next()
		if err != nil {
			return
		}
		c.Write(wire.AppendResponse(nil, &wire.Response{ID: req.ID, Op: wire.OpRedirect, LeaderID: 1, Leader: leader}))
		next()
	})
	r := client.NewRelay(client.Options{})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.Forward(ctx, follower, "alice", &wire.Request{ID: 42, Op: wire.OpAcquire, Key: "k", LeaseMS: 1000})
	if err != nil || resp.Op != wire.OpGranted || resp.Token != 9 || resp.ID != 42 {
		t.Fatalf("Forward: %+v, %v; want granted token 9 under id 42", resp, err)
	}
}

// With no answer, the relay says whether the call may have reached the
// member: a connection that breaks after the call was sent is
// outcome-unknown, one that never opened is not sent.
func TestRelaySaysWhetherTheCallLeft(t *testing.T) {
	cut := fakeMember(t, func(_ int32, c net.Conn, next func() (wire.Request, error)) {
		next() // read the call, then hang up without an answer
	})
	r := client.NewRelay(client.Options{})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &wire.Request{ID: 1, Op: wire.OpAcquire, Key: "k", LeaseMS: 1000}
	if _, err := r.Forward(ctx, cut, "", req); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("a connection cut after the call: %v, want ErrOutcomeUnknown", err)
	}
	closed := freeport.For(t) // nothing listens there
	if _, err := r.Forward(ctx, closed, "", req); !errors.Is(err, client.ErrNotSent) {
		t.Errorf("a refused connection: %v, want ErrNotSent", err)
	}
}

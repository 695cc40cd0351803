package client_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
)

// unknownOnce answers the first admin request outcome-unknown (a leader
// that lost leadership before the change applied) and every later one
// with an answer, counting the admin requests it received.
func unknownOnce(t *testing.T) (addr string, received func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	count := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if wire.CheckGreeting(r) != nil {
					return
				}
				io.WriteString(c, wire.Greeting)
				for {
					body, err := wire.ReadFrame(r)
					if err != nil {
						return
					}
					req, err := wire.DecodeRequest(body)
					if err != nil || req.Op != wire.OpAdmin {
						continue // the client's announcement of its features
					}
					mu.Lock()
					count++
					n := count
					mu.Unlock()
					resp := wire.Response{ID: req.ID, Op: wire.OpAdminResult, Body: []byte(`{"members":[]}`)}
					if n == 1 {
						resp = wire.Response{ID: req.ID, Op: wire.OpOutcomeUnknown, Reason: "leadership lost"}
					}
					if _, err := c.Write(wire.AppendResponse(nil, &resp)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return count }
}

// An idempotent admin command (a membership change, which succeeds
// unchanged once applied) is asked again when its outcome is unknown; any
// other returns ErrOutcomeUnknown.
func TestAdminAsksAnIdempotentCommandAgainWhenItsOutcomeIsUnknown(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	addr, received := unknownOnce(t)
	if err := newClient(t, addr).Admin(ctx, "member.add", map[string]any{"id": 4}, nil, true); err != nil || received() != 2 {
		t.Fatalf("idempotent: %v after %d requests, want success after 2", err, received())
	}
	addr, received = unknownOnce(t)
	if err := newClient(t, addr).Admin(ctx, "leader.transfer", nil, nil, false); !errors.Is(err, client.ErrOutcomeUnknown) || received() != 1 {
		t.Fatalf("not idempotent: %v after %d requests, want ErrOutcomeUnknown after 1", err, received())
	}
}

package client_test

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
)

// A member that is stopping sends a goaway, then still answers a request
// the client had already sent: the client gets that answer (never an
// unknown outcome), sends nothing more on that connection, hangs up once
// it is idle, and sends its next call over a new connection.
func TestGoAwayEndsTheConnectionWithoutLosingAnAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted, hungUp atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := accepted.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if wire.CheckGreeting(r) != nil {
					return
				}
				io.WriteString(c, wire.Greeting)
				goneAway := false
				for {
					body, err := wire.ReadFrame(r)
					if err != nil {
						if goneAway {
							hungUp.Add(1)
						}
						return
					}
					req, err := wire.DecodeRequest(body)
					if err != nil || (req.Op == wire.OpStatus && req.Features != 0) {
						continue
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
			}()
		}
	}()
	cl := newClient(t, ln.Addr().String())
	ctx := ctxT(t, 5*time.Second)
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

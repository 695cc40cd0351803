package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/watchnet"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// Rule: a member's first bytes on a connection are its greeting, even when
// Shutdown begins while the member waits for the client's greeting; the
// goaway comes right after it. A goaway sent first is read by the client as
// the greeting, which makes the member look like something other than
// raftlock, and the client fails its call (a ProtocolError) instead of
// retrying it on another member. A goaway never sent leaves the client on
// the connection until Shutdown gives up on it.
func TestGoAwayComesAfterTheGreeting(t *testing.T) {
	c := nodetest.New(t, 1, nil)
	s := server.New(c.WaitLeader())
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := watchnet.Watch(inner)
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })

	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second)) // a broken member fails the test instead of hanging it
	watchnet.Wait(t, ln.Reading, "the member to wait for the greeting")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdown := make(chan error, 1)
	go func() { shutdown <- s.Shutdown(ctx) }()
	waitShutdownBegun(t, s, ln)
	waitEarlyWrite(ln.Wrote)

	io.WriteString(nc, wire.Greeting)
	r := bufio.NewReader(nc)
	if err := wire.CheckGreeting(r); err != nil {
		t.Fatalf("the member's first bytes are not its greeting: %v", err)
	}
	body, err := wire.ReadFrame(r)
	if err != nil {
		t.Fatalf("no goaway after the greeting: %v", err)
	}
	resp, err := wire.DecodeResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ID != wire.GoAwayID || resp.Op != wire.OpUnavailable {
		t.Fatalf("first frame after the greeting: %+v, want a goaway", resp)
	}

	nc.Close() // what a client does with an idle connection it was asked to leave
	select {
	case err := <-shutdown:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("Shutdown waited out its deadline after the client had left")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after the client left")
	}
}

// waitShutdownBegun waits until s's Shutdown (running elsewhere) has closed
// ln and sent its goaways.
func waitShutdownBegun(t *testing.T, s *server.Server, ln *watchnet.Listener) {
	t.Helper()
	watchnet.Wait(t, ln.Closed, "Shutdown to close the listener")
	// Shutdown closes the listener and sends its goaways under one lock,
	// the one Serve takes to refuse a server that is shutting down: once
	// Serve has refused, the goaways are queued.
	spare, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(spare); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve after Shutdown began: %v, want net.ErrClosed", err)
	}
}

// waitEarlyWrite gives a member that writes before the greeting a moment to
// do so: it would write as soon as Shutdown has queued the goaway, while a
// correct member writes nothing, and nothing happening is no condition to
// wait on. The wait keeps the old bug from slipping past the test when the
// greeting happens to win the race; it cannot make a correct member fail.
func waitEarlyWrite(wrote <-chan struct{}) {
	select {
	case <-wrote:
	case <-time.After(100 * time.Millisecond):
	}
}

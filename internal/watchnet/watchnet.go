// Package watchnet wraps a listener so a test can see what a server does
// with the connections it accepts: its first read, its first write, and
// the listener's close; it can also hold the server's reads until the test
// lets them through, to put a race's two sides in a chosen order. It
// also serves a server under test (Serve, BeginShutdown) and stands in
// for one (Accept).
package watchnet

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// Listener reports, by closing a channel, the first read (Reading) and
// the first write (Wrote) on any connection it accepted and its own Close
// (Closed). Made by Held, it holds every read until Release.
type Listener struct {
	net.Listener
	Reading, Wrote, Closed chan struct{}

	gate                              chan struct{} // nil: reads are never held
	readingOnce, wroteOnce, closeOnce sync.Once
	releaseOnce                       sync.Once
}

// Watch wraps ln.
func Watch(ln net.Listener) *Listener {
	return &Listener{Listener: ln, Reading: make(chan struct{}), Wrote: make(chan struct{}), Closed: make(chan struct{})}
}

// Held wraps ln, holding every read of an accepted connection until
// Release (Reading is closed when the first read is held).
func Held(ln net.Listener) *Listener {
	l := Watch(ln)
	l.gate = make(chan struct{})
	return l
}

// Release lets held reads through; later ones are not held.
func (l *Listener) Release() {
	if l.gate != nil {
		l.releaseOnce.Do(func() { close(l.gate) })
	}
}

// Accept wraps the accepted connection.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, l: l}, nil
}

// Close closes Closed, then the listener.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.Closed) })
	return l.Listener.Close()
}

type conn struct {
	net.Conn
	l *Listener
}

func (c *conn) Read(b []byte) (int, error) {
	c.l.readingOnce.Do(func() { close(c.l.Reading) })
	if c.l.gate != nil {
		<-c.l.gate
	}
	return c.Conn.Read(b)
}

func (c *conn) Write(b []byte) (int, error) {
	c.l.wroteOnce.Do(func() { close(c.l.Wrote) })
	return c.Conn.Write(b)
}

// Wait fails t unless ch is closed within 10 s; what names the event.
func Wait(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Server is a server Serve runs and BeginShutdown stops: one with a
// graceful Shutdown that refuses Serve once Shutdown began.
type Server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// Serve serves s, until t ends, on a new loopback listener that wrap
// (Watch or Held) wraps, and returns that listener.
func Serve(t testing.TB, s Server, wrap func(net.Listener) *Listener) *Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := wrap(inner)
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return l
}

// BeginShutdown starts s's Shutdown, with a 10 s deadline, on s's
// listener l, and returns once it has begun: l closed and the goaways
// queued, with a moment given to a server that would write before its
// greeting. Shutdown's error comes on done; ctx is its context, so that
// the caller can see whether it waited out its deadline.
func (l *Listener) BeginShutdown(t testing.TB, s Server) (done <-chan error, ctx context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	shutdown := make(chan error, 1)
	go func() { shutdown <- s.Shutdown(ctx) }()
	l.shutdownBegun(t, s)
	l.giveEarlyWriteAMoment()
	return shutdown, ctx
}

// shutdownBegun waits until s's Shutdown, running elsewhere, has closed l
// and sent its goaways: Shutdown closes the listener and queues its
// goaways under the one lock Serve takes to refuse a server that is
// shutting down, so once Serve has refused with net.ErrClosed, the
// goaways are queued.
func (l *Listener) shutdownBegun(t testing.TB, s Server) {
	t.Helper()
	Wait(t, l.Closed, "Shutdown to close the listener")
	spare, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(spare); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve after Shutdown began: %v, want net.ErrClosed", err)
	}
}

// giveEarlyWriteAMoment gives a server that writes before its greeting a
// moment to do so: it would write as soon as Shutdown has queued the
// goaway, while a correct server writes nothing, and nothing happening is
// no condition to wait on. The moment keeps the old bug from slipping past
// a test when the greeting happens to win the race; it cannot make a
// correct server fail.
func (l *Listener) giveEarlyWriteAMoment() {
	select {
	case <-l.Wrote:
	case <-time.After(100 * time.Millisecond):
	}
}

// Accept listens on a loopback port until t ends, hands every connection
// it accepts to handle, in turn on one goroutine, and returns the port's
// address. The listener is closed, and its goroutine has returned, when
// t's cleanup is done.
func Accept(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

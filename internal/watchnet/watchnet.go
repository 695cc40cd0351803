// Package watchnet wraps a listener so a test can see what a server does
// with the connections it accepts: its first read, its first write, and
// the listener's close; it can also hold the server's reads until the test
// lets them through, to put a race's two sides in a chosen order.
package watchnet

import (
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

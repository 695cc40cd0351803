package nodetest

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
)

// Raw is a client protocol connection driven frame by frame: for tests of
// what a member answers to what the Go client would not send (pipelined,
// oversized or reused requests).
type Raw struct {
	t    testing.TB
	Conn net.Conn
	R    *bufio.Reader
}

// DialRaw connects to a member's client address and exchanges the
// greeting; the connection closes when the test ends.
func DialRaw(t testing.TB, addr string) *Raw {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, wire.Greeting); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := wire.CheckGreeting(r); err != nil {
		t.Fatalf("greeting from %s: %v", addr, err)
	}
	conn.SetReadDeadline(time.Time{})
	return &Raw{t: t, Conn: conn, R: r}
}

// Send writes req.
func (c *Raw) Send(req *wire.Request) {
	c.t.Helper()
	if _, err := c.Conn.Write(wire.AppendRequest(nil, req)); err != nil {
		c.t.Fatal(err)
	}
}

// Recv reads the next answer, waiting at most five seconds.
func (c *Raw) Recv() wire.Response {
	c.t.Helper()
	c.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	return readResponse(c.t, c.R, "no answer")
}

// ExpectGoAway reads the next frame of r, which must be the goaway of a
// stopping member (the answer that tells a client to leave its
// connection); after says what came before it, for the failure message.
func ExpectGoAway(t testing.TB, r *bufio.Reader, after string) {
	t.Helper()
	if resp := readResponse(t, r, "no goaway after "+after); resp.ID != wire.GoAwayID || resp.Op != wire.OpUnavailable {
		t.Fatalf("first frame after %s: %+v, want a goaway", after, resp)
	}
}

// readResponse reads and decodes the next answer of r, failing t with
// what and the error if none comes.
func readResponse(t testing.TB, r *bufio.Reader, what string) wire.Response {
	t.Helper()
	body, err := wire.ReadFrame(r)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	resp, err := wire.DecodeResponse(body)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return resp
}

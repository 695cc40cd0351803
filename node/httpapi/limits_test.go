package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// okBackend answers every call with a value.
type okBackend struct{}

func (okBackend) Do(context.Context, string, uint64, *wire.Request) *wire.Response {
	return &wire.Response{Op: wire.OpValue}
}

func (okBackend) PeerAPIAddr(uint64) string { return "" }

func (okBackend) Watch(context.Context, string, uint64, string, wire.Revision) (*node.Watch, *wire.Response) {
	return nil, &wire.Response{Op: wire.OpUnavailable}
}

// serveAPI serves h as the API port does, within lim, on a loopback
// address it returns, until the test ends; entered counts the requests
// that reached h.
func serveAPI(t *testing.T, h http.Handler, lim server.Limits) (addr string, entered *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered = new(atomic.Int64)
	srv := httpapi.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		h.ServeHTTP(w, r)
	}), lim, slog.New(slog.DiscardHandler))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), entered
}

// slowPost opens a connection to addr and sends a call's headers
// declaring a body of 100 bytes, and only its first byte.
func slowPost(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "POST /v1/get HTTP/1.1\r\nHost: raftlock\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	return c
}

// Callers that declare a body and send it slowly hold no call slot: with
// twice as many of them as the API has slots, another caller's call is
// answered (issue 37, finding 8: 4,200 such POSTs made every other call
// answer 503 overloaded).
func TestSlowBodiesHoldNoSlots(t *testing.T) {
	lim := server.Limits{MaxConns: 4, HandshakeTimeout: time.Minute}
	addr, entered := serveAPI(t, httpapi.NewWithBackend(okBackend{}, lim), lim)
	for range 2 * lim.MaxConns {
		slowPost(t, addr)
	}
	nodetest.WaitFor(t, 10*time.Second, "the slow calls to reach the API", func() bool { return entered.Load() == int64(2*lim.MaxConns) })
	post(t, http.DefaultClient, "http://"+addr+"/v1/get", `{"key":"k"}`).expect(t, "a call beside slow bodies", 200, nil, nil)
}

// A body not received within the handshake timeout is answered 408, name
// invalid-argument, and its HTTP/1 connection closes: nothing else can
// follow a request cut in the middle.
func TestSlowBodyTimesOut(t *testing.T) {
	lim := server.Limits{HandshakeTimeout: 100 * time.Millisecond}
	addr, _ := serveAPI(t, httpapi.NewWithBackend(okBackend{}, lim), lim)
	c := slowPost(t, addr)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer to a body that never came: %v", err)
	}
	var body struct{ Error, Message string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || body.Error != wire.ErrorNameInvalidArgument || !strings.Contains(body.Message, "100ms") {
		t.Errorf("a body that never came: %s %+v, want 408 invalid-argument naming the timeout", resp.Status, body)
	}
	if !resp.Close {
		t.Errorf("the 408 does not say the connection closes")
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the connection after the 408: %v, want it closed", err)
	}
}

// Over HTTP/2 a body too slow ends its own stream with a 408; the
// connection and its other streams go on.
func TestSlowBodyTimesOutOverHTTP2(t *testing.T) {
	lim := server.Limits{HandshakeTimeout: 100 * time.Millisecond}
	addr, _ := serveAPI(t, httpapi.NewWithBackend(okBackend{}, lim), lim)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	cl := &http.Client{Transport: &http.Transport{Protocols: &protos}, Timeout: 10 * time.Second}
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go pw.Write([]byte("{"))
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/get", pr)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a body too slow over HTTP/2: %s %s, want 408", resp.Proto, resp.Status)
	}
	post(t, cl, "http://"+addr+"/v1/get", `{"key":"k"}`).expect(t, "a call on the same connection after", 200, nil, nil)
}

func (okBackend) Admit(string, server.Limit) (func(), error) { return func() {}, nil }

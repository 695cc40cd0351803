package httpapi_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// expectClosed reads c until it ends and fails unless it ends (EOF, or a
// reset) within within.
func expectClosed(t *testing.T, what string, c net.Conn, r io.Reader, within time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: still open after %v", what, within)
	}
}

// A connection that made a call and then idles is closed after the
// member's idle timeout, on the API port and the HTTP port alike (issue
// 37, finding 4: a connection answered 403 on the HTTP port was still
// open 130 s later).
func TestIdleConnectionsClose(t *testing.T) {
	lim := server.Limits{IdleTimeout: 300 * time.Millisecond}
	m := nodetest.StartTLSMemberWith(t, `{"rules":[{"identity":"alice","prefixes":["a/"],"rights":["lock","read"]}]}`, lim, "alice")
	tc := m.ClientTLS(t, "alice")
	tc.NextProtos = []string{"http/1.1"}
	for port, addr := range map[string]string{"API": m.API, "HTTP": m.HTTP} {
		c, err := tls.Dial("tcp", addr, tc)
		if err != nil {
			t.Fatalf("%s port: %v", port, err)
		}
		defer c.Close()
		// A 405 on the API port, a 403 on the HTTP port: either way an
		// answer, after which the connection idles.
		if _, err := io.WriteString(c, "GET /v1/get HTTP/1.1\r\nHost: raftlock\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("%s port: %v", port, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		expectClosed(t, port+" port connection idle past the idle timeout", c, r, 10*time.Second)
	}
}

// A connection that never completes its TLS handshake is closed after
// the member's handshake timeout, on both ports.
func TestUnfinishedHandshakesAreCut(t *testing.T) {
	lim := server.Limits{HandshakeTimeout: 500 * time.Millisecond}
	m := nodetest.StartTLSMemberWith(t, `{"rules":[]}`, lim, "alice")
	for port, addr := range map[string]string{"API": m.API, "HTTP": m.HTTP} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("%s port: %v", port, err)
		}
		defer c.Close()
		// Well before the 5 s the ports allowed before the limit was
		// the member's.
		expectClosed(t, port+" port connection without a handshake", c, c, 3*time.Second)
	}
}

// emfileListener fails its first fails accepts as a process out of file
// descriptors does.
type emfileListener struct {
	net.Listener
	fails atomic.Int64
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// A port whose accepts fail for want of file descriptors serves again
// once they succeed, and counts each failure (issue 37, finding 4).
func TestAcceptErrorsAreRetriedAndCounted(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &emfileListener{Listener: inner}
	ln.fails.Store(3)
	metrics := node.NewMetrics(false)
	srv := httpapi.NewServer(httpapi.NewWithBackend(okBackend{}, server.Limits{}), server.Limits{}, slog.New(slog.DiscardHandler))
	go srv.Serve(httpapi.CountAccepts(ln, metrics, "api"))
	t.Cleanup(func() { srv.Close() })
	post(t, http.DefaultClient, "http://"+inner.Addr().String()+"/v1/get", `{"key":"k"}`).expect(t, "a call after failed accepts", 200, nil, nil)
	var got dto.Metric
	if err := metrics.AcceptErrors.WithLabelValues("api").Write(&got); err != nil {
		t.Fatal(err)
	}
	if n := got.GetCounter().GetValue(); n != 3 {
		t.Errorf("accept errors counted: %v, want 3", n)
	}
}

// Connections that never send a request wait in a bounded pool whose
// oldest go first (review of issue 37: the API port had no bound at all,
// so idle connections could hold file descriptors until every port of
// the member failed its accepts), and a caller still gets through.
func TestSilentConnectionsAreBoundedOldestFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := server.Limits{MaxPendingConns: 8, MaxPendingConnsPerAddress: 8}
	metrics := node.NewMetrics(false)
	srv := httpapi.NewServer(httpapi.NewWithBackend(okBackend{}, lim), lim, slog.New(slog.DiscardHandler))
	httpapi.LimitPending(srv, lim, metrics, "api")
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	var silent []net.Conn
	for range 40 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		silent = append(silent, c)
	}
	// The first 32 were evicted by the 8 after them: closed at once.
	for i, c := range silent[:32] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("silent connection %d of 40 was not closed past a pool of 8: %v", i+1, err)
		}
	}
	post(t, http.DefaultClient, "http://"+ln.Addr().String()+"/v1/get", `{"key":"k"}`).expect(t, "a call beside 8 silent connections", 200, nil, nil)
	if n := node.CounterValue(metrics.ConnectionsRefused.WithLabelValues("api", "pending_per_address")); n < 32 {
		t.Errorf("evictions counted: %v, want at least 32", n)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/watchnet"
	"github.com/raftlock/raftlock/node"
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
	s := server.New(oneMember(t))
	ln := watchnet.Serve(t, s, watchnet.Watch)

	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second)) // a broken member fails the test instead of hanging it
	watchnet.Wait(t, ln.Reading, "the member to wait for the greeting")

	shutdown, ctx := ln.BeginShutdown(t, s)

	io.WriteString(nc, wire.Greeting)
	r := bufio.NewReader(nc)
	if err := wire.CheckGreeting(r); err != nil {
		t.Fatalf("the member's first bytes are not its greeting: %v", err)
	}
	nodetest.ExpectGoAway(t, r, "the greeting")

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

// oneMember is the member of a one-member cluster, once it leads.
func oneMember(t *testing.T) *node.Node {
	t.Helper()
	return nodetest.New(t, 1, nil).WaitLeader()
}

// servedWithLimits is the client address of a one-member cluster's
// server held to lim.
func servedWithLimits(t *testing.T, lim server.Limits) string {
	t.Helper()
	s := server.New(oneMember(t))
	s.SetLimits(lim)
	return server.ServeLocal(t, s)
}

// greeted dials addr and says whether the member answered the greeting.
func greeted(t *testing.T, addr string) (net.Conn, bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, wire.Greeting)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	return c, wire.CheckGreeting(bufio.NewReader(c)) == nil
}

func TestConnectionsPastTheLimitAreClosedBeforeTheGreeting(t *testing.T) {
	addr := servedWithLimits(t, server.Limits{MaxConns: 2})
	first, ok1 := greeted(t, addr)
	_, ok2 := greeted(t, addr)
	if !ok1 || !ok2 {
		t.Fatal("a connection within the limit was not greeted")
	}
	if _, ok := greeted(t, addr); ok {
		t.Fatal("the third connection was greeted with --max-connections 2")
	}
	// A slot frees when a connection closes.
	first.Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, ok := greeted(t, addr); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted after one closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPprofOnlyWithDebug(t *testing.T) {
	n := oneMember(t)
	get := func(h http.Handler) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
		return rec.Code
	}
	mux := server.HTTPHandler(n)
	if code := get(mux); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without --debug: %d, want 404", code)
	}
	server.DebugHandlers(mux)
	if code := get(mux); code != http.StatusOK {
		t.Fatalf("/debug/pprof/ with --debug: %d, want 200", code)
	}
}

// A limit of the member core reaches the client as the Overloaded answer.
func TestOverloadedAnswer(t *testing.T) {
	c := nodetest.New(t, 1, func(cfg *node.Config) { cfg.Limits = node.Limits{MaxKeys: 1} })
	ctx := nodetest.Context(t, 10*time.Second)
	if _, err := c.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	s := server.New(c.Nodes()[0])
	for i, want := range []wire.Op{wire.OpGranted, wire.OpOverloaded} {
		resp := s.Handle(ctx, &wire.Request{ID: uint64(i + 1), Op: wire.OpAcquire, Key: string(rune('a' + i)), LeaseMS: 10000})
		if resp.Op != want {
			t.Fatalf("acquire %d: answer 0x%02x %q, want 0x%02x", i+1, uint8(resp.Op), resp.Reason, uint8(want))
		}
	}
}

// Waiting acquires past --max-inflight-per-conn are answered overloaded,
// and they never stop the member reading the connection: the release they
// wait for comes on the same connection.
func TestWaitingAcquiresPastThePerConnectionLimit(t *testing.T) {
	addr := servedWithLimits(t, server.Limits{MaxInflightPerConn: 2})
	raw := nodetest.DialRaw(t, addr)
	send, recv := raw.Send, raw.Recv
	send(&wire.Request{ID: 1, Op: wire.OpAcquire, Key: "k", LeaseMS: 10000})
	granted := recv()
	if granted.Op != wire.OpGranted {
		t.Fatalf("first acquire: 0x%02x %s", uint8(granted.Op), granted.Reason)
	}
	for id := uint64(2); id <= 4; id++ {
		send(&wire.Request{ID: id, Op: wire.OpAcquire, Key: "k", LeaseMS: 10000, WaitMS: 10000})
	}
	if resp := recv(); resp.ID != 4 || resp.Op != wire.OpOverloaded {
		t.Fatalf("third waiting acquire: id %d answer 0x%02x, want id 4 overloaded", resp.ID, uint8(resp.Op))
	}
	send(&wire.Request{ID: 5, Op: wire.OpRelease, Key: "k", Token: granted.Token})
	got := map[uint64]wire.Op{}
	for len(got) < 2 {
		resp := recv()
		got[resp.ID] = resp.Op
	}
	// Requests 2 and 3 run concurrently, so either may have queued first.
	if got[5] != wire.OpReleased || (got[2] != wire.OpGranted && got[3] != wire.OpGranted) {
		t.Fatalf("after the release: %v, want 5 released and 2 or 3 granted", got)
	}
}

// The Go client takes a connection closed before the greeting as not sent:
// it retries until its deadline, and gets in once a slot frees.
func TestClientRetriesPastTheConnectionLimit(t *testing.T) {
	addr := servedWithLimits(t, server.Limits{MaxConns: 1})
	first := nodetest.Client(t, addr)
	ctx := nodetest.Context(t, 5*time.Second)
	if _, err := first.Acquire(ctx, "a", 10*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	second := nodetest.Client(t, addr)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := second.Acquire(short, "b", 10*time.Second, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire past --max-connections: got %v, want a retry until the deadline", err)
	}
	first.Close()
	if _, err := second.Acquire(ctx, "b", 10*time.Second, 0); err != nil {
		t.Fatalf("acquire once a connection closed: %v", err)
	}
}

// A member's console asks the other members for their status with its own
// certificate (identity member-N): status, and only status, is allowed to
// a member identity whatever the ACL says.
func TestMemberMayAskForStatus(t *testing.T) {
	c := nodetest.New(t, 1, nil)
	c.WaitLeader()
	s := c.Server(1)
	acl, err := server.ParseACL([]byte(`{"rules":[{"identity":"batch","prefixes":["jobs/"],"rights":["lock","read"]}]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	s.SetACL(acl)
	ctx := nodetest.Context(t, 10*time.Second)
	for _, tc := range []struct {
		who  string
		req  wire.Request
		want wire.Op
	}{
		{"member-2", wire.Request{Op: wire.OpStatus}, wire.OpStatusInfo},
		{"batch", wire.Request{Op: wire.OpStatus}, wire.OpPermissionDenied},
		{"member-x", wire.Request{Op: wire.OpStatus}, wire.OpPermissionDenied},
		{"member-0", wire.Request{Op: wire.OpStatus}, wire.OpPermissionDenied},
		{"member-2", wire.Request{Op: wire.OpList}, wire.OpPermissionDenied},
		{"member-2", wire.Request{Op: wire.OpAdmin, Key: wire.AdminMemberList}, wire.OpPermissionDenied},
	} {
		tc.req.ID = 1
		if resp := s.Do(ctx, tc.who, wire.FeaturePermissionDenied, &tc.req); resp == nil || resp.Op != tc.want {
			t.Errorf("%s asking op %v: %+v, want op %v", tc.who, tc.req.Op, resp, tc.want)
		}
	}
	if !s.MayRead("batch", "jobs/a") || s.MayRead("batch", "other") || !slices.Equal(s.ReadPrefixes("batch"), []string{"jobs/"}) || len(s.ReadPrefixes("nobody")) != 0 {
		t.Errorf("batch's read rights: jobs/a %v, other %v, prefixes %v", s.MayRead("batch", "jobs/a"), s.MayRead("batch", "other"), s.ReadPrefixes("batch"))
	}
}

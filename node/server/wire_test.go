package server

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// /status (node.Status) and the protocol's status answer (wire.Status)
// are one type (memberstatus.Status), so they carry the same JSON: this
// compiles only while they are.
var _ wire.Status = node.Status{}

// A refused request gets PermissionDenied only on a connection whose
// client announced it decodes it; any other client gets Error with a
// reason that reads "permission denied", which every client version
// prints. The connection stays open either way.
func TestRefusalIsReadableByOldAndNewClients(t *testing.T) {
	n, err := node.New(node.Config{Config: member.Config{ID: 1, Peers: map[uint64]string{1: freeport.For(t)}}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s := New(n)
	s.SetACL(&ACL{Rules: []Rule{}}) // nobody may do anything
	c, err := net.Dial("tcp", ServeLocal(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, wire.Greeting)
	r := bufio.NewReader(c)
	if err := wire.CheckGreeting(r); err != nil {
		t.Fatal(err)
	}
	ask := func(req *wire.Request) wire.Response {
		t.Helper()
		if _, err := c.Write(wire.AppendRequest(nil, req)); err != nil {
			t.Fatal(err)
		}
		body, err := wire.ReadFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := wire.DecodeResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	old := ask(&wire.Request{ID: 1, Op: wire.OpGet, Key: "k"})
	if old.Op != wire.OpError || !strings.HasPrefix(old.Reason, "permission denied") {
		t.Fatalf("a client that announced nothing: %+v, want Error \"permission denied: ...\"", old)
	}
	c.Write(wire.AppendRequest(nil, &wire.Request{ID: 2, Op: wire.OpStatus, Features: wire.FeaturePermissionDenied}))
	resp := ask(&wire.Request{ID: 3, Op: wire.OpAcquire, Key: "k", LeaseMS: 1000})
	if resp.ID != 3 || resp.Op != wire.OpPermissionDenied || !strings.Contains(resp.Reason, `may not lock "k"`) {
		t.Fatalf("after the announcement: %+v, want PermissionDenied for request 3 (the announcement has no answer)", resp)
	}
	if resp := ask(&wire.Request{ID: 4, Op: wire.OpStatus}); resp.Op != wire.OpPermissionDenied {
		t.Fatalf("status without the admin right: %+v", resp)
	}
}

// A forced release needs the admin right, a plain release only lock; a
// list needs read on its prefix. (Over plain TCP the identity is "".)
func TestForcedReleaseNeedsAdminAndListNeedsReadOnItsPrefix(t *testing.T) {
	a := &ACL{Rules: []Rule{{Identity: "", Prefixes: []string{"jobs/"}, Rights: []string{RightLock, RightRead}}}}
	allowed := func(req *wire.Request) (bool, string) {
		right, what, key := permission(req)
		return a.Allows("", right, key), what
	}
	for _, c := range []struct {
		req     wire.Request
		refused bool
	}{
		{wire.Request{Op: wire.OpRelease, Key: "jobs/a", Token: 1}, false},
		{wire.Request{Op: wire.OpRelease, Key: "jobs/a", Force: true}, true},
		{wire.Request{Op: wire.OpList, Prefix: "jobs/"}, false},
		{wire.Request{Op: wire.OpList, Prefix: "jobs/x"}, false},
		{wire.Request{Op: wire.OpList, Prefix: ""}, true},
		{wire.Request{Op: wire.OpList, Prefix: "other/"}, true},
	} {
		ok, what := allowed(&c.req)
		if ok == c.refused {
			t.Errorf("%+v: allowed %v, want %v", c.req, ok, !c.refused)
		}
		if c.req.Force && what != `force the release of "jobs/a"` {
			t.Errorf("a forced release is described as %q", what)
		}
	}
	// Admin is scoped to its rule's prefixes (issue 37: admin on a/
	// force-released b/secret).
	a.Rules = append(a.Rules, Rule{Identity: "", Prefixes: []string{"x/"}, Rights: []string{RightAdmin}})
	if ok, _ := allowed(&wire.Request{Op: wire.OpRelease, Key: "jobs/a", Force: true}); ok {
		t.Error("admin on x/ forced the release of jobs/a")
	}
	a.Rules = append(a.Rules, Rule{Identity: "", Prefixes: []string{"jobs/"}, Rights: []string{RightAdmin}})
	if ok, _ := allowed(&wire.Request{Op: wire.OpRelease, Key: "jobs/a", Force: true}); !ok {
		t.Error("admin on jobs/ did not allow a forced release of jobs/a")
	}
}

// The protocol carries the member's event types as they are (WireEvent):
// their numbers and names must agree.
func TestEventTypesAreTheProtocols(t *testing.T) {
	for _, c := range []struct {
		m member.EventType
		w wire.EventType
	}{
		{member.EventGranted, wire.EventGranted}, {member.EventRenewed, wire.EventRenewed},
		{member.EventReleased, wire.EventReleased}, {member.EventExpired, wire.EventExpired},
	} {
		if uint8(c.m) != uint8(c.w) || c.m.String() != c.w.String() {
			t.Errorf("member event %d %q, wire %d %q", c.m, c.m, c.w, c.w)
		}
	}
}

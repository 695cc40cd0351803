package server

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

const exampleACL = `{"rules":[
 {"identity":"batch","prefixes":["jobs/"],"rights":["lock","read"]},
 {"identity":"batch","prefixes":["reports/"],"rights":["read"]},
 {"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]}]}`

// A request is allowed when any rule of its identity grants its right on
// a prefix of its key; an identity without a rule may do nothing.
func TestACLAllows(t *testing.T) {
	a, err := ParseACL([]byte(exampleACL), "example")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who, right, key string
		want            bool
	}{
		{"batch", RightLock, "jobs/x", true},
		{"batch", RightRead, "jobs/x", true},
		{"batch", RightLock, "jobs/", true},
		{"batch", RightLock, "jobs", false},
		{"batch", RightLock, "other/x", false},
		{"batch", RightRead, "reports/q1", true},  // the second rule
		{"batch", RightLock, "reports/q1", false}, // read only there
		{"batch", RightAdmin, "", false},
		{"admin", RightLock, "anything", true},
		{"admin", RightAdmin, "", true},
		{"nobody", RightRead, "jobs/x", false},
		{"", RightRead, "jobs/x", false},
		{"Batch", RightLock, "jobs/x", false}, // identities are exact
	} {
		if got := a.Allows(c.who, c.right, c.key); got != c.want {
			t.Errorf("%q %s %q: %v, want %v", c.who, c.right, c.key, got, c.want)
		}
	}
}

func TestACLRejectsBadFiles(t *testing.T) {
	for name, body := range map[string]string{
		"not json":        `{"rules":`,
		"no rules":        `{}`,
		"unknown field":   `{"rules":[],"extra":1}`,
		"no identity":     `{"rules":[{"prefixes":[""],"rights":["lock"]}]}`,
		"no prefixes":     `{"rules":[{"identity":"a","rights":["lock"]}]}`,
		"no rights":       `{"rules":[{"identity":"a","prefixes":[""]}]}`,
		"unknown right":   `{"rules":[{"identity":"a","prefixes":[""],"rights":["write"]}]}`,
		"misspelt fields": `{"rules":[{"identity":"a","prefix":[""],"rights":["lock"]}]}`,
	} {
		if _, err := ParseACL([]byte(body), name); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseACL([]byte(`{"rules":[]}`), "empty"); err != nil {
		t.Errorf("an empty rule list (nobody may do anything) was refused: %v", err)
	}
}

// LoadACL reads the file anew each time: a reload sees the new rules, and
// a broken file is an error the caller keeps its old ACL on.
func TestACLReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl.json")
	os.WriteFile(path, []byte(exampleACL), 0o644)
	a, err := LoadACL(path)
	if err != nil {
		t.Fatal(err)
	}
	if a.Allows("batch", RightLock, "other/x") {
		t.Fatal("batch may lock other/x before the change")
	}
	os.WriteFile(path, []byte(strings.Replace(exampleACL, `"jobs/"]`, `"jobs/","other/"]`, 1)), 0o644)
	b, err := LoadACL(path)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Allows("batch", RightLock, "other/x") {
		t.Fatal("the reloaded ACL does not let batch lock other/x")
	}
	os.WriteFile(path, []byte(`{"rules":[{"identity":"batch"}]}`), 0o644)
	if _, err := LoadACL(path); err == nil {
		t.Fatal("a broken ACL file loaded")
	}
}

// A refused request gets PermissionDenied only on a connection whose
// client announced it decodes it; any other client gets Error with a
// reason that reads "permission denied", which every client version
// prints. The connection stays open either way.
func TestRefusalIsReadableByOldAndNewClients(t *testing.T) {
	peer, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{Config: member.Config{ID: 1, Peers: map[uint64]string{1: peer}}, DataDir: t.TempDir()})
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
	a.Rules = append(a.Rules, Rule{Identity: "", Prefixes: []string{"x/"}, Rights: []string{RightAdmin}})
	if ok, _ := allowed(&wire.Request{Op: wire.OpRelease, Key: "jobs/a", Force: true}); !ok {
		t.Error("the admin right did not allow a forced release")
	}
}

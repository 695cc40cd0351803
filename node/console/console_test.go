package console_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/console"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// consoles serves a console for each member of c on a loopback port of
// its own and returns their handlers and base URLs by member id.
func consoles(t *testing.T, c *nodetest.Cluster) (map[uint64]http.Handler, map[uint64]string) {
	t.Helper()
	handlers, urls := map[uint64]http.Handler{}, map[uint64]string{}
	for _, id := range c.IDs() {
		con, err := console.New(console.Config{Node: c.Node(id), Server: c.Server(id)})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		con.Register(mux)
		srv := httptest.NewServer(mux)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); con.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; srv.Close() })
		handlers[id], urls[id] = mux, srv.URL
	}
	return handlers, urls
}

// get asks h for path as identity who ("": no client certificate) and
// decodes its JSON answer into out; it returns the status code.
func get(t *testing.T, h http.Handler, who, path string, out any) int {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	if who != "" {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: who}}}}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if out != nil {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("GET %s: %d %v: %s", path, w.Code, err, w.Body)
		}
	}
	return w.Code
}

// hold takes each key on leader with an owner, for a minute.
func hold(t *testing.T, leader *node.Node, keys ...string) {
	t.Helper()
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := leader.AcquireAs(ctx, k, "owner-of-"+k, time.Minute, 0, 0)
		cancel()
		if err != nil {
			t.Fatalf("acquire %s: %v", k, err)
		}
	}
}

// acquireOnLeader takes key for lease on c's leader, and again on the
// leader of the moment if the call failed: on a loaded machine leadership
// may move under a test that runs for a while. An attempt that failed with
// its outcome unknown may have taken the key, so after a failure "held"
// means held.
func acquireOnLeader(c *nodetest.Cluster, key string, lease time.Duration) error {
	var err error
	for attempt := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.WaitLeader().AcquireAs(ctx, key, "", lease, 0, 0)
		cancel()
		if err == nil || (attempt > 0 && errors.Is(err, node.ErrHeld)) {
			return nil
		}
	}
	return err
}

func keysOf(p console.Locks) []string {
	var ks []string
	for _, l := range p.Locks {
		ks = append(ks, l.Key)
	}
	return ks
}

func TestConsoleShowsMembersLocksAndWaiters(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	leader := c.WaitLeader()
	hold(t, leader, "jobs/a", "jobs/b", "jobs/c", "other/x")
	// One acquire waits on jobs/a until the test ends.
	wctx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	go leader.AcquireAs(wctx, "jobs/a", "waiter", time.Minute, time.Minute, 0)
	hs, _ := consoles(t, c)
	h := hs[leader.ID()]

	var cl console.Cluster
	nodetest.WaitFor(t, 20*time.Second, "every member healthy in the members table, and events", func() bool {
		get(t, h, "", "/console/api/cluster", &cl)
		healthy := 0
		for _, m := range cl.Members {
			if m.Health == console.Healthy && m.Role != "" {
				healthy++
			}
		}
		return healthy == 3 && len(cl.Events) > 0
	})
	if cl.Leader != leader.ID() || cl.Self != leader.ID() || !slices.Equal(cl.Voters, []uint64{1, 2, 3}) || cl.Cluster == "" {
		t.Errorf("cluster: leader %d self %d voters %v id %q; want leader and self %d, voters 1 2 3", cl.Leader, cl.Self, cl.Voters, cl.Cluster, leader.ID())
	}
	for _, m := range cl.Members {
		if (m.Role == "leader") != (m.ID == leader.ID()) || m.Addr != c.Clients[m.ID] {
			t.Errorf("member %d: role %q addr %q; the leader is %d at %s", m.ID, m.Role, m.Addr, leader.ID(), c.Clients[m.ID])
		}
	}
	if !slices.ContainsFunc(cl.Events, func(e console.Event) bool { return e.Kind == "leader" }) {
		t.Errorf("no leader among the events: %+v", cl.Events)
	}

	// Paged by prefix, two at a time, with owners, leases and waiters.
	var p console.Locks
	nodetest.WaitFor(t, 20*time.Second, "the waiter on jobs/a", func() bool {
		get(t, h, "", "/console/api/locks?prefix=jobs/&limit=2", &p)
		return len(p.Locks) > 0 && p.Locks[0].Waiters == 1
	})
	if !slices.Equal(keysOf(p), []string{"jobs/a", "jobs/b"}) || !p.More || !p.WaitersKnown {
		t.Fatalf("first page: %v more %v waiters known %v; want jobs/a, jobs/b, more, known", keysOf(p), p.More, p.WaitersKnown)
	}
	if l := p.Locks[1]; l.Owner != "owner-of-jobs/b" || l.LeaseMS != 60000 || l.RemainingMS <= 0 || l.Token == 0 || l.Waiters != 0 {
		t.Errorf("jobs/b: %+v", l)
	}
	get(t, h, "", "/console/api/locks?prefix=jobs/&limit=2&after=jobs/b", &p)
	if !slices.Equal(keysOf(p), []string{"jobs/c"}) || p.More {
		t.Errorf("second page: %v more %v; want jobs/c alone", keysOf(p), p.More)
	}
	if code := get(t, h, "", "/console/api/locks?limit=x", nil); code != http.StatusBadRequest {
		t.Errorf("limit=x answered %d, want 400", code)
	}

	// A follower's console shows the same table; waiters only the leader knows.
	f := c.Followers(leader)[0]
	nodetest.WaitFor(t, 20*time.Second, "the follower's table", func() bool {
		get(t, hs[f.ID()], "", "/console/api/locks", &p)
		return len(p.Locks) == 4
	})
	if p.WaitersKnown {
		t.Errorf("a follower's page says it knows the waiters")
	}

	// The page and its files, loading nothing from elsewhere.
	for _, path := range []string{"/", "/console/app.js", "/console/app.css"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		// The SVG namespace is a name, not something loaded.
		body := strings.ReplaceAll(w.Body.String(), "http://www.w3.org/2000/svg", "")
		if w.Code != http.StatusOK || strings.Contains(body, "http://") || strings.Contains(body, "https://") {
			t.Errorf("GET %s: %d, or it loads something from elsewhere", path, w.Code)
		}
	}
}

func TestConsoleShowsOnlyWhatTheACLLetsRead(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	leader := c.WaitLeader()
	acl, err := server.ParseACL([]byte(`{"rules":[{"identity":"alice","prefixes":["jobs/"],"rights":["read","admin"]},
		{"identity":"root","prefixes":[""],"rights":["read","admin"]}]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range c.IDs() {
		c.Server(id).SetACL(acl)
	}
	hold(t, leader, "jobs/a", "secret/s")
	hs, _ := consoles(t, c)
	h := hs[leader.ID()]

	var refused struct {
		Error        string   `json:"error"`
		ReadPrefixes []string `json:"read_prefixes"`
	}
	if code := get(t, h, "alice", "/console/api/locks", &refused); code != http.StatusForbidden || !slices.Equal(refused.ReadPrefixes, []string{"jobs/"}) {
		t.Errorf("alice listing every key: %d %+v; want 403 naming jobs/", code, refused)
	}
	var p console.Locks
	if code := get(t, h, "alice", "/console/api/locks?prefix=jobs/", &p); code != http.StatusOK || !slices.Equal(keysOf(p), []string{"jobs/a"}) {
		t.Errorf("alice listing jobs/: %d %v", code, keysOf(p))
	}
	if get(t, h, "root", "/console/api/locks", &p); !slices.Equal(keysOf(p), []string{"jobs/a", "secret/s"}) {
		t.Errorf("root listing every key: %v", keysOf(p))
	}
	var cl console.Cluster
	if get(t, h, "alice", "/console/api/cluster", &cl); cl.Identity != "alice" || !slices.Equal(cl.ReadPrefixes, []string{"jobs/"}) {
		t.Errorf("alice's cluster: identity %q prefixes %v", cl.Identity, cl.ReadPrefixes)
	}

	// Expiries: each identity sees those of the keys it may read. The
	// console watches for them once looked at (above), within a second or
	// so: each round holds two keys for a second until root has seen both
	// expire.
	expired := func(who string) []string {
		var cl console.Cluster
		get(t, h, who, "/console/api/cluster", &cl)
		var ks []string
		for _, e := range cl.Expiries {
			ks = append(ks, e.Key)
		}
		return ks
	}
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; ; round++ {
		mine, other := fmt.Sprintf("jobs/short-%d", round), fmt.Sprintf("secret/short-%d", round)
		for _, k := range []string{mine, other} {
			if err := acquireOnLeader(c, k, time.Second); err != nil {
				t.Fatalf("acquire %s: %v", k, err)
			}
		}
		seen := func() bool {
			got := expired("root")
			return slices.Contains(got, mine) && slices.Contains(got, other)
		}
		for end := time.Now().Add(5 * time.Second); !seen() && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond)
		}
		if seen() {
			if got := expired("alice"); !slices.Contains(got, mine) || slices.ContainsFunc(got, func(k string) bool { return strings.HasPrefix(k, "secret/") }) {
				t.Errorf("alice's expiries: %q; want %s and no secret/ key", got, mine)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("root never saw %s and %s expire: %q", mine, other, expired("root"))
		}
	}
}

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/member"
)

// testCluster runs members in this process over real loopback TCP with real
// pebble directories.
type testCluster struct {
	t      testing.TB
	peers  map[uint64]string
	dirs   map[uint64]string
	clocks map[uint64]*SkewClock
	nodes  map[uint64]*Node
	tune   func(*Config)
}

func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func newTestCluster(t testing.TB, size int, tune func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, peers: map[uint64]string{}, dirs: map[uint64]string{},
		clocks: map[uint64]*SkewClock{}, nodes: map[uint64]*Node{}, tune: tune}
	for id := uint64(1); id <= uint64(size); id++ {
		c.peers[id] = freeAddr(t)
		c.dirs[id] = t.TempDir()
		c.clocks[id] = NewSkewClock()
	}
	for id := range c.peers {
		c.start(id)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.Close()
		}
	})
	return c
}

func (c *testCluster) start(id uint64) *Node {
	c.t.Helper()
	level := slog.LevelWarn
	if os.Getenv("RAFTLOCK_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	cfg := Config{
		ID: id, Peers: c.peers, ClientAddr: fmt.Sprintf("client-%d", id), DataDir: c.dirs[id],
		Clock:  c.clocks[id],
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		c.t.Fatalf("new node %d: %v", id, err)
	}
	if err := n.Start(); err != nil {
		c.t.Fatalf("start node %d: %v", id, err)
	}
	c.nodes[id] = n
	return n
}

func (c *testCluster) stop(id uint64) {
	c.nodes[id].Close()
	delete(c.nodes, id)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leader waits for a member that may make lock decisions (past its term
// barrier) and returns it.
func (c *testCluster) leader() *Node {
	c.t.Helper()
	var l *Node
	waitFor(c.t, 10*time.Second, "a ready leader", func() bool {
		for _, n := range c.nodes {
			ready := false
			n.inspect(func(c *member.Core) { ready = c.CanDecide() == nil })
			if ready {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

func (c *testCluster) followers(leader *Node) []*Node {
	var fs []*Node
	for _, n := range c.nodes {
		if n != leader {
			fs = append(fs, n)
		}
	}
	return fs
}

// converged waits until every running member has applied index and reports
// one digest there.
func (c *testCluster) converged(timeout time.Duration) string {
	c.t.Helper()
	var digest string
	waitFor(c.t, timeout, "members to converge", func() bool {
		var applied uint64
		digest = ""
		for _, n := range c.nodes {
			st := n.Status()
			if digest == "" {
				applied, digest = st.Applied, st.Digest
			} else if st.Applied != applied || st.Digest != digest {
				return false
			}
		}
		return true
	})
	return digest
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHappyPathTokensGrow(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t, 20*time.Second)
	var last uint64
	for i := range 30 {
		key := fmt.Sprintf("k%d", i%4)
		tok, err := l.Acquire(ctx, key, time.Minute, 0, 0)
		if err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		if tok <= last {
			t.Fatalf("token %d not above %d", tok, last)
		}
		last = tok
		if _, err := l.Acquire(ctx, key, time.Minute, 0, 0); !errors.Is(err, ErrHeld) {
			t.Fatalf("second acquire of held %s: %v, want ErrHeld", key, err)
		}
		info, err := l.Get(ctx, key, false)
		if err != nil || !info.Held || info.Token != tok || info.RemainingMS <= 0 {
			t.Fatalf("get %s = %+v, %v", key, info, err)
		}
		if err := l.Release(ctx, key, tok, 0); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	c.converged(10 * time.Second)
	for _, f := range c.followers(l) {
		var nl *NotLeaderError
		if _, err := f.Acquire(ctx, "x", time.Second, 0, 0); !errors.As(err, &nl) || nl.LeaderID != l.ID() {
			t.Fatalf("follower acquire: %v, want NotLeaderError naming %d", err, l.ID())
		}
	}
}

func TestBadInputRejected(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	l := c.leader()
	ctx := ctxT(t, 10*time.Second)
	long := string(make([]byte, 257))
	var inv *InvalidArgumentError
	checks := map[string]error{}
	_, checks["empty key"] = l.Acquire(ctx, "", time.Second, 0, 0)
	_, checks["long key"] = l.Acquire(ctx, long, time.Second, 0, 0)
	_, checks["short lease"] = l.Acquire(ctx, "k", 9*time.Millisecond, 0, 0)
	_, checks["long lease"] = l.Acquire(ctx, "k", time.Hour+time.Millisecond, 0, 0)
	checks["renew lease"] = l.Renew(ctx, "k", 1, 0, 0)
	checks["release key"] = l.Release(ctx, "", 1, 0)
	_, checks["get key"] = l.Get(ctx, long, false)
	for name, err := range checks {
		if !errors.As(err, &inv) {
			t.Errorf("%s: %v, want InvalidArgumentError", name, err)
		}
	}
	if _, err := l.Acquire(ctx, "k", 10*time.Millisecond, 0, 0); err != nil {
		t.Fatalf("acquire with the shortest lease: %v", err)
	}
}

func TestLeaderCrashLockSurvivesAndExpires(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t, 30*time.Second)
	const lease = 1500 * time.Millisecond
	tok, err := l.Acquire(ctx, "k", lease, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	c.stop(l.ID())
	nl := c.leader()
	info, err := nl.Get(ctx, "k", false)
	if err != nil || !info.Held || info.Token != tok {
		t.Fatalf("after leader crash: get = %+v, %v; want held by %d", info, err, tok)
	}
	waitFor(t, 10*time.Second, "the new leader to expire the lock", func() bool {
		info, err := nl.Get(ctx, "k", false)
		return err == nil && !info.Held
	})
	if since := time.Since(acquired); since < lease {
		t.Fatalf("lock expired after %v, before its %v lease", since, lease)
	}
	next, err := nl.Acquire(ctx, "k", time.Second, 0, 0)
	if err != nil || next <= tok {
		t.Fatalf("next grant = %d, %v; want above %d", next, err, tok)
	}
	// The crashed member comes back and catches up.
	c.start(l.ID())
	c.converged(10 * time.Second)
}

func TestRestartFromDiskKeepsDigest(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t, 30*time.Second)
	for i := range 20 {
		if _, err := l.Acquire(ctx, fmt.Sprintf("k%d", i), time.Hour, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := c.converged(10 * time.Second)
	lastToken := l.Status().LastToken
	for id := range c.peers {
		c.stop(id)
	}
	for id := range c.peers {
		c.start(id)
	}
	nl := c.leader()
	if after := c.converged(10 * time.Second); after == before {
		// The new leader's empty entry does not change the table.
	} else {
		t.Fatalf("digest after restart %s, before %s", after, before)
	}
	tok, err := nl.Acquire(ctx, "fresh", time.Second, 0, 0)
	if err != nil || tok != lastToken+1 {
		t.Fatalf("first grant after restart = %d, %v; want %d", tok, err, lastToken+1)
	}
	info, err := nl.Get(ctx, "k3", false)
	if err != nil || !info.Held {
		t.Fatalf("k3 after restart: %+v, %v", info, err)
	}
	// Rule 6: after a restart the lease restarts in full (one hour).
	if info.RemainingMS < (time.Hour - time.Minute).Milliseconds() {
		t.Fatalf("remaining lease after restart %dms, want a full hour", info.RemainingMS)
	}
}

func TestLaggingFollowerCatchesUpBySnapshot(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.SnapshotEvery = 20; cfg.SnapshotKeep = 5 })
	l := c.leader()
	ctx := ctxT(t, 60*time.Second)
	lagging := c.followers(l)[0].ID()
	c.stop(lagging)
	for i := range 120 {
		key := fmt.Sprintf("k%d", i%7)
		if i%3 == 0 {
			key = fmt.Sprintf("held%d", i)
		}
		tok, err := l.Acquire(ctx, key, time.Hour, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 != 0 {
			if err := l.Release(ctx, key, tok, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, _ := c.nodes[l.ID()].storage.FirstIndex()
	if first <= 2 {
		t.Fatalf("leader log not compacted: first index %d", first)
	}
	n := c.start(lagging)
	c.converged(20 * time.Second)
	if got := member.CounterValue(n.metrics.SnapshotsInstalled); got < 1 {
		t.Fatalf("lagging member installed %v snapshots, want >= 1", got)
	}
}

func TestFastFollowerClockKeepsLockUntilCommittedExpire(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	fast := c.followers(l)[0]
	c.clocks[fast.ID()].Set(10, 0)
	ctx := ctxT(t, 30*time.Second)
	const lease = 2 * time.Second
	tok, err := l.Acquire(ctx, "k", lease, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the fast follower's own deadline has passed...
	waitFor(t, 10*time.Second, "the fast follower's deadline to pass", func() bool {
		info, err := fast.Get(ctx, "k", true)
		return err == nil && info.Held && info.RemainingMS == 0
	})
	// ...while the leader's has not: the lock is still held everywhere.
	info, err := l.Get(ctx, "k", false)
	if err != nil || !info.Held || info.Token != tok || info.RemainingMS == 0 {
		t.Fatalf("leader view while the follower's deadline passed: %+v, %v", info, err)
	}
	if fi, _ := fast.Get(ctx, "k", true); !fi.Held {
		t.Fatal("fast follower dropped the lock on its own clock")
	}
	// The lock goes only through the committed Expire, everywhere at once.
	waitFor(t, 10*time.Second, "the committed expire", func() bool {
		info, err := fast.Get(ctx, "k", true)
		return err == nil && !info.Held
	})
	c.converged(10 * time.Second)
}

func TestGhostLockReleasedBeforeLease(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t, 30*time.Second)
	gone, cancel := context.WithCancel(ctx)
	cancel() // the requester is gone before its Grant applies
	before := l.Status().LastToken
	if _, err := l.Acquire(gone, "k", time.Hour, 0, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a gone requester: %v", err)
	}
	waitFor(t, 10*time.Second, "the grant to apply", func() bool { return l.Status().LastToken > before })
	waitFor(t, 10*time.Second, "the ghost lock to be released", func() bool {
		info, err := l.Get(ctx, "k", false)
		return err == nil && !info.Held
	})
	if got := member.CounterValue(l.metrics.GhostReleases); got != 1 {
		t.Fatalf("ghost releases = %v, want 1", got)
	}
	if _, err := l.Acquire(ctx, "k", time.Second, 0, 0); err != nil {
		t.Fatalf("acquire after ghost release: %v", err)
	}
}

func waiterCount(n *Node, key string) int {
	w := 0
	n.inspect(func(c *member.Core) { w = c.Waiters(key) })
	return w
}

func TestWaitersGrantedInFIFOOrder(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t, 30*time.Second)
	holder, err := l.Acquire(ctx, "k", time.Hour, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		who   int
		token uint64
		err   error
	}
	grants := make(chan grant, 4)
	leaving, leave := context.WithCancel(ctx)
	for who := range 4 {
		wctx := ctx
		if who == 1 {
			wctx = leaving // this waiter disconnects while queued
		}
		go func() {
			tok, err := l.Acquire(wctx, "k", time.Hour, 20*time.Second, 0)
			grants <- grant{who, tok, err}
		}()
		waitFor(t, 5*time.Second, "the waiter to queue", func() bool { return waiterCount(l, "k") == who+1 })
	}
	leave()
	if g := <-grants; g.who != 1 || !errors.Is(g.err, context.Canceled) {
		t.Fatalf("first answer %+v, want waiter 1 cancelled", g)
	}
	waitFor(t, 5*time.Second, "the gone waiter to leave the queue", func() bool { return waiterCount(l, "k") == 3 })
	prev := holder
	if err := l.Release(ctx, "k", holder, 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{0, 2, 3} {
		g := <-grants
		if g.err != nil || g.who != want || g.token <= prev {
			t.Fatalf("grant %+v, want waiter %d with a token above %d", g, want, prev)
		}
		prev = g.token
		if err := l.Release(ctx, "k", g.token, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWaitRunsOutAsHeld(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	l := c.leader()
	ctx := ctxT(t, 10*time.Second)
	if _, err := l.Acquire(ctx, "k", time.Hour, 0, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := l.Acquire(ctx, "k", time.Hour, 200*time.Millisecond, 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("waiting acquire: %v, want ErrHeld", err)
	}
	if time.Since(start) < 200*time.Millisecond {
		t.Fatal("wait ended early")
	}
	if waiterCount(l, "k") != 0 {
		t.Fatal("timed-out waiter left in the queue")
	}
}

func TestStaleReleaseRejected(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t, 30*time.Second)
	old, err := l.Acquire(ctx, "k", 100*time.Millisecond, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cur uint64
	waitFor(t, 10*time.Second, "a new holder after expiry", func() bool {
		cur, err = l.Acquire(ctx, "k", time.Hour, 0, 0)
		return err == nil
	})
	if err := l.Release(ctx, "k", old, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stale release: %v, want ErrNotFound", err)
	}
	if err := l.Renew(ctx, "k", old, time.Second, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stale renew: %v, want ErrNotFound", err)
	}
	if err := l.Release(ctx, "nokey", cur, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release of a free key: %v, want ErrNotFound", err)
	}
	info, err := l.Get(ctx, "k", false)
	if err != nil || !info.Held || info.Token != cur {
		t.Fatalf("holder after stale release: %+v, %v", info, err)
	}
	if err := l.Renew(ctx, "k", cur, 30*time.Second, 0); err != nil {
		t.Fatalf("renew by the holder: %v", err)
	}
	if err := l.Release(ctx, "k", cur, 0); err != nil {
		t.Fatalf("release by the holder: %v", err)
	}
}

func TestGarbageOnPeerPortIsIsolated(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	ctx := ctxT(t, 20*time.Second)
	for _, payload := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3},
		append(appendFrame(nil, encodeHello(9, l.ID(), "x")), 0, 0, 0, 5, 1),
	} {
		conn, err := net.Dial("tcp", c.peers[l.ID()])
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(payload)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Fatal("the node answered garbage instead of closing the connection")
		}
		conn.Close()
	}
	if _, err := l.Acquire(ctx, "k", time.Second, 0, 0); err != nil {
		t.Fatalf("acquire after garbage: %v", err)
	}
}

func TestCommittedLogReplaysTokensAndTags(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	l := c.leader()
	ctx := ctxT(t, 10*time.Second)
	tok, err := l.Acquire(ctx, "k", time.Second, 0, 77)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "k", tok, 78); err != nil {
		t.Fatal(err)
	}
	cmds, complete, err := l.CommittedLog()
	if err != nil || !complete {
		t.Fatalf("CommittedLog: complete=%v err=%v", complete, err)
	}
	var grant, release *LoggedCommand
	for i := range cmds {
		switch cmds[i].Op {
		case "grant":
			grant = &cmds[i]
		case "release":
			release = &cmds[i]
		}
	}
	if grant == nil || grant.Tag != 77 || grant.Token != tok || grant.Status != "Granted" {
		t.Fatalf("grant record %+v, want tag 77 token %d", grant, tok)
	}
	if release == nil || release.Status != "Released" || release.Index <= grant.Index || release.Tag != 78 {
		t.Fatalf("release record %+v", release)
	}
}

// A leader cut off from its followers still believes it leads for up to an
// election timeout. In that window its table may be stale, so it must not
// answer "held" or "not the holder" from it: negative answers are reads and
// are confirmed with a quorum first (found by the chaos harness: a leader
// resumed after SIGSTOP answered a renewal from its pre-pause table).
func TestIsolatedLeaderGivesNoNegativeAnswers(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ElectionTicks = 50 }) // a long window
	l := c.leader()
	ctx := ctxT(t, 10*time.Second)
	tok, err := l.Acquire(ctx, "k", time.Hour, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.followers(l) {
		c.stop(f.ID())
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "k", time.Second, 0, 0); err == nil || errors.Is(err, ErrHeld) {
		t.Fatalf("try-acquire on an isolated leader: %v; want no answer, not ErrHeld", err)
	}
	if err := l.Release(short, "k", tok+1, 0); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("release with a wrong token on an isolated leader: %v; want no answer, not ErrNotFound", err)
	}
	if err := l.Renew(short, "nokey", 1, time.Second, 0); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("renew of a free key on an isolated leader: %v; want no answer, not ErrNotFound", err)
	}
}

package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/peer"
)

// leading starts a cluster of size members, waits for its leader and
// returns them with a context for the test's calls that ends after d.
func leading(t *testing.T, size int, d time.Duration) (*nodetest.Cluster, *node.Node, context.Context) {
	t.Helper()
	c := nodetest.New(t, size, nil)
	return c, c.WaitLeader(), nodetest.Context(t, d)
}

func TestHappyPathTokensGrow(t *testing.T) {
	c, l, ctx := leading(t, 3, 20*time.Second)
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
		if _, err := l.Acquire(ctx, key, time.Minute, 0, 0); !errors.Is(err, node.ErrHeld) {
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
	c.Converged(10 * time.Second)
	for _, f := range c.Followers(l) {
		var nl *node.NotLeaderError
		if _, err := f.Acquire(ctx, "x", time.Second, 0, 0); !errors.As(err, &nl) || nl.LeaderID != l.ID() {
			t.Fatalf("follower acquire: %v, want NotLeaderError naming %d", err, l.ID())
		}
	}
}

func TestBadInputRejected(t *testing.T) {
	_, l, ctx := leading(t, 1, 10*time.Second)
	long := string(make([]byte, 257))
	var inv *node.InvalidArgumentError
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
	c, l, ctx := leading(t, 3, 30*time.Second)
	const lease = 1500 * time.Millisecond
	tok, err := l.Acquire(ctx, "k", lease, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	c.StopMember(l.ID())
	nl := c.WaitLeader()
	info, err := nl.Get(ctx, "k", false)
	if err != nil || !info.Held || info.Token != tok {
		t.Fatalf("after leader crash: get = %+v, %v; want held by %d", info, err, tok)
	}
	nodetest.WaitFor(t, 10*time.Second, "the new leader to expire the lock", func() bool {
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
	c.Restart(l.ID())
	c.Converged(10 * time.Second)
}

func TestRestartFromDiskKeepsDigest(t *testing.T) {
	c, l, ctx := leading(t, 3, 30*time.Second)
	for i := range 20 {
		if _, err := l.Acquire(ctx, fmt.Sprintf("k%d", i), time.Hour, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Converged(10 * time.Second)
	lastToken := nodetest.Status(t, l).LastToken
	for _, id := range c.IDs() {
		c.StopMember(id)
	}
	for _, id := range c.IDs() {
		c.Restart(id)
	}
	nl := c.WaitLeader()
	if after := c.Converged(10 * time.Second); after == before {
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
	c := nodetest.New(t, 3, func(cfg *node.Config) { cfg.SnapshotEvery = 20; cfg.SnapshotKeep = 5 })
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 60*time.Second)
	lagging := c.Followers(l)[0].ID()
	c.StopMember(lagging)
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
	first, _ := l.StorageFirstIndex()
	if first <= 2 {
		t.Fatalf("leader log not compacted: first index %d", first)
	}
	n := c.Restart(lagging)
	c.Converged(20 * time.Second)
	if got := node.CounterValue(n.Metrics().SnapshotsInstalled); got < 1 {
		t.Fatalf("lagging member installed %v snapshots, want >= 1", got)
	}
}

func TestFastFollowerClockKeepsLockUntilCommittedExpire(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	l := c.WaitLeader()
	fast := c.Followers(l)[0]
	c.Clock(fast.ID()).Set(10, 0)
	ctx := nodetest.Context(t, 30*time.Second)
	const lease = 2 * time.Second
	tok, err := l.Acquire(ctx, "k", lease, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the fast follower's own deadline has passed...
	nodetest.WaitFor(t, 10*time.Second, "the fast follower's deadline to pass", func() bool {
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
	nodetest.WaitFor(t, 10*time.Second, "the committed expire", func() bool {
		info, err := fast.Get(ctx, "k", true)
		return err == nil && !info.Held
	})
	c.Converged(10 * time.Second)
}

func TestGhostLockReleasedBeforeLease(t *testing.T) {
	_, l, ctx := leading(t, 3, 30*time.Second)
	gone, cancel := context.WithCancel(ctx)
	cancel() // the requester is gone before its Grant applies
	before := nodetest.Status(t, l).LastToken
	if _, err := l.Acquire(gone, "k", time.Hour, 0, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a gone requester: %v", err)
	}
	nodetest.WaitFor(t, 10*time.Second, "the grant to apply", func() bool { return nodetest.Status(t, l).LastToken > before })
	nodetest.WaitFor(t, 10*time.Second, "the ghost lock to be released", func() bool {
		info, err := l.Get(ctx, "k", false)
		return err == nil && !info.Held
	})
	if got := node.CounterValue(l.Metrics().GhostReleases); got != 1 {
		t.Fatalf("ghost releases = %v, want 1", got)
	}
	if _, err := l.Acquire(ctx, "k", time.Second, 0, 0); err != nil {
		t.Fatalf("acquire after ghost release: %v", err)
	}
}

// Callers that leave while the member's loop is busy must leave no lock
// behind: the news that a caller left once overtook its call (two queues),
// so the core ignored it, granted the lock anyway and kept it held by nobody
// for the whole lease.
func TestCallersLeavingWhileTheLoopIsBusyLeaveNoLock(t *testing.T) {
	_, l, ctx := leading(t, 1, 30*time.Second)
	const callers = 20
	busy, resume := make(chan struct{}), make(chan struct{})
	go node.Inspect(l, func(*member.Core) { close(busy); <-resume })
	<-busy
	var wg sync.WaitGroup
	for i := range callers {
		gone, cancel := context.WithCancel(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			go func() { time.Sleep(time.Duration(i%5) * time.Millisecond); cancel() }()
			if _, err := l.Acquire(gone, fmt.Sprintf("k%d", i), time.Hour, 0, 0); !errors.Is(err, context.Canceled) {
				t.Errorf("acquire %d: %v, want context.Canceled", i, err)
			}
		}()
	}
	wg.Wait() // every caller has left while the loop was busy
	close(resume)
	for i := range callers {
		key := fmt.Sprintf("k%d", i)
		nodetest.WaitFor(t, 10*time.Second, key+" to be free", func() bool {
			info, err := l.Get(ctx, key, false)
			return err == nil && !info.Held
		})
	}
}

func waiterCount(n *node.Node, key string) int {
	w := 0
	node.Inspect(n, func(c *member.Core) { w = c.Waiters(key) })
	return w
}

func TestWaitersGrantedInFIFOOrder(t *testing.T) {
	_, l, ctx := leading(t, 3, 30*time.Second)
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
		nodetest.WaitFor(t, 5*time.Second, "the waiter to queue", func() bool { return waiterCount(l, "k") == who+1 })
	}
	leave()
	if g := <-grants; g.who != 1 || !errors.Is(g.err, context.Canceled) {
		t.Fatalf("first answer %+v, want waiter 1 cancelled", g)
	}
	nodetest.WaitFor(t, 5*time.Second, "the gone waiter to leave the queue", func() bool { return waiterCount(l, "k") == 3 })
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
	_, l, ctx := leading(t, 1, 10*time.Second)
	if _, err := l.Acquire(ctx, "k", time.Hour, 0, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := l.Acquire(ctx, "k", time.Hour, 200*time.Millisecond, 0); !errors.Is(err, node.ErrHeld) {
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
	_, l, ctx := leading(t, 3, 30*time.Second)
	old, err := l.Acquire(ctx, "k", 100*time.Millisecond, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cur uint64
	nodetest.WaitFor(t, 10*time.Second, "a new holder after expiry", func() bool {
		cur, err = l.Acquire(ctx, "k", time.Hour, 0, 0)
		return err == nil
	})
	if err := l.Release(ctx, "k", old, 0); !errors.Is(err, node.ErrNotFound) {
		t.Fatalf("stale release: %v, want ErrNotFound", err)
	}
	if err := l.Renew(ctx, "k", old, time.Second, 0); !errors.Is(err, node.ErrNotFound) {
		t.Fatalf("stale renew: %v, want ErrNotFound", err)
	}
	if err := l.Release(ctx, "nokey", cur, 0); !errors.Is(err, node.ErrNotFound) {
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
	c, l, ctx := leading(t, 3, 20*time.Second)
	for _, payload := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3},
		append(peer.AppendFrame(nil, peer.EncodeHello(9, l.ID(), "x")), 0, 0, 0, 5, 1),
	} {
		conn, err := net.Dial("tcp", c.Peers[l.ID()])
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
	_, l, ctx := leading(t, 1, 10*time.Second)
	tok, err := l.Acquire(ctx, "k", time.Second, 0, 77)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "k", tok, 78); err != nil {
		t.Fatal(err)
	}
	cmds, complete, err := l.CommittedLog(context.Background())
	if err != nil || !complete {
		t.Fatalf("CommittedLog: complete=%v err=%v", complete, err)
	}
	var grant, release *node.LoggedCommand
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
	c := nodetest.New(t, 3, func(cfg *node.Config) { cfg.ElectionTicks = 50 }) // a long window
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 10*time.Second)
	tok, err := l.Acquire(ctx, "k", time.Hour, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.Followers(l) {
		c.StopMember(f.ID())
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "k", time.Second, 0, 0); err == nil || errors.Is(err, node.ErrHeld) {
		t.Fatalf("try-acquire on an isolated leader: %v; want no answer, not ErrHeld", err)
	}
	if err := l.Release(short, "k", tok+1, 0); err == nil || errors.Is(err, node.ErrNotFound) {
		t.Fatalf("release with a wrong token on an isolated leader: %v; want no answer, not ErrNotFound", err)
	}
	if err := l.Renew(short, "nokey", 1, time.Second, 0); err == nil || errors.Is(err, node.ErrNotFound) {
		t.Fatalf("renew of a free key on an isolated leader: %v; want no answer, not ErrNotFound", err)
	}
}

// BenchmarkAcquireRelease is one lock cycle through the in-process API of a
// three-member cluster on loopback TCP and real pebble directories: two
// commits, no client protocol.
func BenchmarkAcquireRelease(b *testing.B) {
	c := nodetest.New(b, 3, nil)
	l := c.WaitLeader()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		tok, err := l.Acquire(ctx, "k", time.Minute, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx, "k", tok, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// snapFiles counts the snapshot files in member id's data directory.
func snapFiles(t *testing.T, c *nodetest.Cluster, id uint64) int {
	t.Helper()
	names, err := os.ReadDir(filepath.Join(c.DataDir(id), "snap"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, e := range names {
		if strings.HasSuffix(e.Name(), ".snap") {
			n++
		}
	}
	return n
}

// A member keeps its snapshot as a base and deltas (each snapshot costs
// what changed since the last), and restores from them to the table it
// had: a whole cluster restarted from its chains converges on the digest
// it had, and a member that missed the compacted log catches up from a
// leader's chain, then writes a base of its own and restarts from it.
func TestMembersSnapshotDeltasAndRestoreFromThem(t *testing.T) {
	c := nodetest.New(t, 3, func(cfg *node.Config) { cfg.SnapshotEvery = 8; cfg.SnapshotKeep = 2 })
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 90*time.Second)
	churn := func(round int) {
		t.Helper()
		for i := range 40 {
			key := fmt.Sprintf("r%d/k%d", round, i)
			tok, err := l.Acquire(ctx, key, time.Hour, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if i%4 != 0 { // a quarter stay held; the rest come and go between snapshots
				if err := l.Release(ctx, key, tok, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Some locks held since an earlier round go: removals in a delta.
		if round > 0 {
			if info, err := l.Get(ctx, fmt.Sprintf("r%d/k0", round-1), false); err == nil && info.Held {
				if err := l.Release(ctx, fmt.Sprintf("r%d/k0", round-1), info.Token, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for round := range 3 {
		churn(round)
	}
	for _, id := range c.IDs() {
		nodetest.WaitFor(t, 20*time.Second, fmt.Sprintf("member %d keeps deltas", id), func() bool { return snapFiles(t, c, id) > 1 })
	}
	before := c.Converged(10 * time.Second)
	for _, id := range c.IDs() {
		c.StopMember(id)
	}
	for _, id := range c.IDs() {
		c.Restart(id)
	}
	l = c.WaitLeader()
	if after := c.Converged(10 * time.Second); after != before {
		t.Fatalf("digest after restarting from base and deltas %s, before %s", after, before)
	}

	lagging := c.Followers(l)[0].ID()
	c.StopMember(lagging)
	for round := 3; round < 6; round++ {
		churn(round)
	}
	n := c.Restart(lagging)
	c.Converged(20 * time.Second)
	if got := node.CounterValue(n.Metrics().SnapshotsInstalled); got < 1 {
		t.Fatalf("lagging member installed %v snapshots, want >= 1", got)
	}
	churn(6)
	nodetest.WaitFor(t, 20*time.Second, "the caught-up member's own base and delta", func() bool { return snapFiles(t, c, lagging) > 1 })
	want := c.Converged(10 * time.Second)
	c.StopMember(lagging)
	c.Restart(lagging)
	if got := c.Converged(20 * time.Second); got != want {
		t.Fatalf("digest after the caught-up member restarted %s, want %s", got, want)
	}
}

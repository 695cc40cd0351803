package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/watchnet"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
)

func startCluster(t *testing.T, size int) (*nodetest.Cluster, uint64) {
	t.Helper()
	return startTuned(t, size, nil)
}

// startTuned is startCluster with tune adjusting each member's config.
func startTuned(t *testing.T, size int, tune func(*node.Config)) (*nodetest.Cluster, uint64) {
	t.Helper()
	c := nodetest.New(t, size, tune)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c, leader
}

// startWithClient starts a three-member cluster and returns it, its
// leader's id, a client of every member and a context of 20 s for the
// test's calls.
func startWithClient(t *testing.T) (*nodetest.Cluster, uint64, *client.Client, context.Context) {
	t.Helper()
	return startTunedWithClient(t, nil)
}

// startTunedWithClient is startWithClient with tune adjusting each
// member's config.
func startTunedWithClient(t *testing.T, tune func(*node.Config)) (*nodetest.Cluster, uint64, *client.Client, context.Context) {
	t.Helper()
	c, leader := startTuned(t, 3, tune)
	return c, leader, nodetest.Client(t, c.Endpoints()...), nodetest.Context(t, 20*time.Second)
}

// rareElections makes a cluster's elections rare: on a loaded machine a
// member starved past the default election timeout (200 ms) starts one,
// and renewals fail while it runs, so a lock the test means to keep can
// rightly be lost; the tests of renewals are not about elections.
func rareElections(cfg *node.Config) { cfg.ElectionTicks = 50 }

// acquire takes key on cl for lease without waiting, failing t if it
// cannot.
func acquire(t *testing.T, ctx context.Context, cl *client.Client, key string, lease time.Duration) client.Grant {
	t.Helper()
	g, err := cl.Acquire(ctx, key, lease, 0)
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return g
}

func TestRedirectFromEachFollower(t *testing.T) {
	c, leader := startCluster(t, 3)
	ctx := nodetest.Context(t, 20*time.Second)
	for id, addr := range c.Clients {
		if id == leader {
			continue
		}
		cl := nodetest.Client(t, addr) // knows only a follower
		key := fmt.Sprintf("via-%d", id)
		g, err := cl.Acquire(ctx, key, time.Minute, 0)
		if err != nil {
			t.Fatalf("acquire through follower %d: %v", id, err)
		}
		info, err := cl.Get(ctx, key)
		if err != nil || !info.Held || info.Token != g.Token {
			t.Fatalf("get through follower %d: %+v, %v", id, info, err)
		}
		if err := cl.Release(ctx, key, g.Token); err != nil {
			t.Fatalf("release through follower %d: %v", id, err)
		}
	}
}

func TestThousandConcurrentRequestsOnOneConnection(t *testing.T) {
	// A burst of a thousand requests under the race detector on two busy
	// cores can starve heartbeats past the default election timeout, and a
	// leader change rightly answers "outcome unknown"; this test is about
	// one connection's concurrency, so elections are made rare.
	c := nodetest.New(t, 3, nodetest.RareElections)
	lctx, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer lcancel()
	leader, err := c.Leader(lctx)
	if err != nil {
		t.Fatal(err)
	}
	cl := nodetest.Client(t, c.Clients[leader])
	ctx := nodetest.Context(t, 60*time.Second)
	const n = 1000
	tokens := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := cl.Acquire(ctx, fmt.Sprintf("k%d", i), time.Minute, 0)
			tokens[i], errs[i] = g.Token, err
		}()
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if seen[tokens[i]] {
			t.Fatalf("token %d issued twice", tokens[i])
		}
		seen[tokens[i]] = true
	}
	st, err := cl.Status(ctx, c.Clients[leader])
	if err != nil || st.Locks != n {
		t.Fatalf("status: %+v, %v; want %d locks", st, err, n)
	}
}

// cutter accepts connections, reads one request and cuts the connection
// without answering, counting what it received.
func cutter(t *testing.T) (addr string, received func() int) {
	t.Helper()
	var count atomic.Int32
	addr = fakeMember(t, func(_ int32, _ net.Conn, next func() (wire.Request, error)) {
		if _, err := next(); err == nil {
			count.Add(1)
		}
	})
	return addr, func() int { return int(count.Load()) }
}

func TestOutcomeUnknownWhenConnectionCutAfterSend(t *testing.T) {
	addr, received := cutter(t)
	cl := nodetest.Client(t, addr)
	ctx := nodetest.Context(t, 5*time.Second)
	_, err := cl.Acquire(ctx, "k", time.Second, 0)
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("acquire over a cut connection: %v, want ErrOutcomeUnknown", err)
	}
	if err := cl.Release(ctx, "k", 1); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("release over a cut connection: %v, want ErrOutcomeUnknown", err)
	}
	if got := received(); got != 2 {
		t.Fatalf("the member received %d requests, want 2 (no retry of a sent grant)", got)
	}
	// A read is safe to retry: it keeps trying until its context ends,
	// here after its second cut connection.
	short, end := context.WithCancel(ctx)
	defer end()
	failures := 0
	client.SetBeforeBackoff(cl, func(context.Context, error) {
		if failures++; failures == 2 {
			end()
		}
	})
	if _, err := cl.Get(short, "k"); errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("get: %v, want the end of its context", err)
	}
	if got := received(); got != 4 {
		t.Fatalf("the member received %d requests, want 4 (the get twice)", got)
	}
}

// rawAcquire sends an acquire on its own connection and returns the
// connection (to be closed to simulate the client vanishing).
func rawAcquire(t *testing.T, addr, key string, lease, wait time.Duration) net.Conn {
	t.Helper()
	raw := nodetest.DialRaw(t, addr)
	raw.Send(&wire.Request{ID: 1, Op: wire.OpAcquire, Key: key, LeaseMS: uint64(lease.Milliseconds()), WaitMS: uint64(wait.Milliseconds())})
	return raw.Conn
}

// checkWaiterLeaves holds k, queues a waiter with queue, lets it leave by
// the function queue returned, then releases k: k must be free, with no
// grant left to a waiter that is gone. waiters reads the leader's waiter
// gauge.
func checkWaiterLeaves(t *testing.T, who string, queue func(ctx context.Context, cl *client.Client, leaderAddr string, waiters func() float64) (leave func())) {
	t.Helper()
	c, leader, cl, ctx := startWithClient(t)
	holder := acquire(t, ctx, cl, "k", time.Hour)
	n := c.Node(leader)
	waiters := func() float64 { return gaugeValue(t, n, "raftlock_waiters") }
	leave := queue(ctx, cl, c.Clients[leader], waiters)
	nodetest.WaitFor(t, 5*time.Second, "the acquire to queue", func() bool { return waiters() == 1 })
	leave()
	if err := cl.Release(ctx, "k", holder.Token); err != nil {
		t.Fatal(err)
	}
	info, err := cl.Get(ctx, "k")
	if err != nil || info.Held {
		t.Fatalf("after release with only a %s: %+v, %v; want free", who, info, err)
	}
}

func TestQueuedClientKilledLeavesNoLock(t *testing.T) {
	checkWaiterLeaves(t, "dead waiter", func(_ context.Context, _ *client.Client, leaderAddr string, waiters func() float64) func() {
		gone := rawAcquire(t, leaderAddr, "k", time.Hour, 30*time.Second)
		return func() {
			gone.Close() // the waiting client dies
			nodetest.WaitFor(t, 5*time.Second, "the dead waiter to leave the queue", func() bool { return waiters() == 0 })
		}
	})
}

func TestCancelledWaiterLeavesQueue(t *testing.T) {
	checkWaiterLeaves(t, "cancelled waiter", func(ctx context.Context, cl *client.Client, _ string, _ func() float64) func() {
		// A waiter gives up (context cancelled) just as the lock is handed over.
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := cl.Acquire(wctx, "k", time.Hour, 20*time.Second)
			done <- err
		}()
		return func() {
			cancel()
			if err := <-done; err == nil {
				t.Fatal("cancelled acquire succeeded")
			}
		}
	})
}

func TestBadFramesIsolatedToTheirConnection(t *testing.T) {
	c, leader, cl, ctx := startWithClient(t)
	acquire(t, ctx, cl, "before", time.Minute)
	bad := [][]byte{
		[]byte("garbage that is not a frame at all"),
		{0, 0, 0, 20, 1, 2},                        // truncated
		{0x7f, 0xff, 0xff, 0xff},                   // oversized
		{0, 0, 0, 9, 0x55, 0, 0, 0, 0, 0, 0, 0, 1}, // unknown opcode
	}
	for i, b := range bad {
		conn := nodetest.DialRaw(t, c.Clients[leader]).Conn
		conn.Write(b)
		if i == 1 {
			conn.(*net.TCPConn).CloseWrite()
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := conn.Read(make([]byte, 64)); err == nil {
			t.Fatalf("bad frame %d: got %d bytes of answer, want the connection closed", i, n)
		}
		conn.Close()
		if _, err := cl.Acquire(ctx, fmt.Sprintf("after%d", i), time.Minute, 0); err != nil {
			t.Fatalf("a good client after bad frame %d: %v", i, err)
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	c, _ := startCluster(t, 1)
	cl := nodetest.Client(t, c.Endpoints()...)
	ctx := nodetest.Context(t, 10*time.Second)
	var inv *client.InvalidArgumentError
	if _, err := cl.Acquire(ctx, "", time.Second, 0); !errors.As(err, &inv) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := cl.Acquire(ctx, "k", 2*time.Hour, 0); !errors.As(err, &inv) {
		t.Fatalf("long lease: %v", err)
	}
}

// A Locker renews its lock (more of the lease is left than the acquire
// alone could leave) and releases it at Unlock.
func TestLockerRenewsAndReleases(t *testing.T) {
	_, _, cl, ctx := startTunedWithClient(t, rareElections)
	lk, err := cl.Lock(ctx, "k", renewedLease, 0)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	nodetest.WaitFor(t, time.Minute, "a renewal", func() bool {
		select {
		case <-lk.Lost():
			t.Fatalf("lost: %v", lk.Err())
		default:
		}
		return renewedSince(t, ctx, cl, "k", lk.Token(), granted)
	})
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := cl.Get(ctx, "k"); info.Held {
		t.Fatal("still held after Unlock")
	}
}

// renewedLease is the lease of the tests of renewals: a renewal (every
// third of it) has the rest of it to succeed, which on a loaded machine,
// elections and all, took more than a second.
const renewedLease = 6 * time.Second

// renewedSince reports whether key is held with token and with more of
// renewedLease left than a lease that began before granted (when the
// acquire's answer came, after it applied) could leave: a renewal applied
// since. It fails t when key is held with another token.
func renewedSince(t *testing.T, ctx context.Context, cl *client.Client, key string, token uint64, granted time.Time) bool {
	t.Helper()
	// Taken before the read: the lease the acquire began has at most this
	// much left when the member reads it.
	bound := renewedLease - time.Since(granted)
	info, err := cl.Get(ctx, key)
	if err != nil {
		return false
	}
	if !info.Held || info.Token != token {
		t.Fatalf("%s while renewing: %+v, want held with token %d", key, info, token)
	}
	return time.Duration(info.RemainingMS)*time.Millisecond > bound+50*time.Millisecond
}

// A request id reused while in flight closes the connection (no answer could
// say which request it is for); the earlier request is cancelled as a
// requester gone, and the second never runs.
func TestDuplicateRequestIDRefused(t *testing.T) {
	c, leader, cl, ctx := startWithClient(t)
	tok := acquire(t, ctx, cl, "k", time.Minute)
	raw := nodetest.DialRaw(t, c.Clients[leader])
	raw.Send(&wire.Request{ID: 7, Op: wire.OpAcquire, Key: "k", LeaseMS: 60000, WaitMS: 10000})
	raw.Send(&wire.Request{ID: 7, Op: wire.OpAcquire, Key: "other", LeaseMS: 60000})
	raw.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := wire.ReadFrame(raw.R); err == nil {
		t.Fatal("a reused request id was answered; want the connection closed")
	}
	if err := cl.Release(ctx, "k", tok.Token); err != nil {
		t.Fatal(err)
	}
	nodetest.WaitFor(t, 10*time.Second, "k to stay free (the cancelled waiter left the queue)", func() bool {
		info, err := cl.Get(ctx, "k")
		return err == nil && !info.Held
	})
	if info, err := cl.Get(ctx, "other"); err != nil || info.Held {
		t.Fatalf("the refused request ran: other is %+v, %v", info, err)
	}
}

// A call with a key or lease outside the bounds of lock rule 10 fails before
// anything is sent, as an invalid argument naming the bounds: never as an
// outcome unknown.
func TestInvalidArgumentsRefusedBeforeSending(t *testing.T) {
	addr, received := cutter(t)
	cl := nodetest.Client(t, addr)
	ctx := nodetest.Context(t, 5*time.Second)
	long := strings.Repeat("k", 5000)
	calls := map[string]error{}
	_, calls["acquire with a 5000-byte key"] = cl.Acquire(ctx, long, time.Second, 0)
	_, calls["acquire with a 2h lease"] = cl.Acquire(ctx, "k", 2*time.Hour, 0)
	_, calls["acquire with a -5s lease"] = cl.Acquire(ctx, "k", -5*time.Second, 0)
	calls["release with an empty key"] = cl.Release(ctx, "", 1)
	calls["renew with a 5ms lease"] = cl.Renew(ctx, "k", 1, 5*time.Millisecond)
	_, calls["get with a 5000-byte key"] = cl.Get(ctx, long)
	for what, err := range calls {
		var inv *client.InvalidArgumentError
		if !errors.As(err, &inv) || errors.Is(err, client.ErrOutcomeUnknown) {
			t.Errorf("%s: %v, want an invalid argument", what, err)
		}
	}
	if err := calls["acquire with a -5s lease"]; err == nil || !strings.Contains(err.Error(), "got -5s") {
		t.Errorf("the message does not show the lease given: %v", err)
	}
	if n := received(); n != 0 {
		t.Fatalf("%d invalid calls reached the member", n)
	}
}

// A member answers a request it can still frame (a whole frame over the
// size limit, a field out of bounds) with InvalidArgument and keeps the
// connection.
func TestOversizedAndBadFieldRequestsAnswered(t *testing.T) {
	c, leader := startCluster(t, 3)
	raw := nodetest.DialRaw(t, c.Clients[leader])
	conn, read := raw.Conn, raw.Recv
	big := wire.AppendRequest(nil, &wire.Request{ID: 3, Op: wire.OpAcquire, Key: strings.Repeat("k", 100<<10), LeaseMS: 1000})
	conn.Write(big)
	if resp := read(); resp.ID != 3 || resp.Op != wire.OpInvalidArgument || !strings.Contains(resp.Reason, "exceeds") {
		t.Fatalf("oversized request answered %+v", resp)
	}
	conn.Write(wire.AppendRequest(nil, &wire.Request{ID: 4, Op: wire.OpGet, Key: strings.Repeat("k", 5000)}))
	if resp := read(); resp.ID != 4 || resp.Op != wire.OpInvalidArgument {
		t.Fatalf("a 5000-byte key answered %+v", resp)
	}
	conn.Write(wire.AppendRequest(nil, &wire.Request{ID: 5, Op: wire.OpGet, Key: "k"}))
	if resp := read(); resp.ID != 5 || resp.Op != wire.OpValue {
		t.Fatalf("the connection did not survive: %+v", resp)
	}
}

// Pointed at the HTTP port, or at a member of another protocol version, the
// client says so at once instead of reporting an unknown outcome.
func TestWrongPortOrVersionNamedAtOnce(t *testing.T) {
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(httpLn)
	t.Cleanup(func() { srv.Close() })
	other := watchnet.Accept(t, func(c net.Conn) {
		io.WriteString(c, "RAFTLOCK/9\n")
		c.Close()
	})
	c, leader := startCluster(t, 1)
	peer := c.Peers[leader]
	for _, tc := range []struct{ addr, want string }{
		{httpLn.Addr().String(), httpLn.Addr().String() + " is not a raftlock client port"},
		{peer, peer + " is not a raftlock client port"},
		{other, "RAFTLOCK/9"},
	} {
		cl := nodetest.Client(t, tc.addr)
		start := time.Now()
		_, err := cl.Acquire(nodetest.Context(t, 10*time.Second), "k", time.Second, 0)
		var pe *client.ProtocolError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want a protocol error saying %q", tc.addr, err, tc.want)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("%s: took %v to say so", tc.addr, took)
		}
	}
}

func gaugeValue(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	mfs, err := n.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// A call the member answers Overloaded is retried with backoff until its
// context ends: it fails as ErrOverloaded when the limit holds until then,
// and succeeds once the limit frees up in time. The context ends between two
// attempts, where the test's hook ends it: a deadline, on a loaded machine,
// may as well pass while an attempt is in flight, and then the outcome of
// that try-acquire is rightly unknown (TestOutcomeUnknownWhenConnectionCutAfterSend).
func TestOverloadedIsRetriedUntilTheDeadline(t *testing.T) {
	c := nodetest.New(t, 1, func(cfg *node.Config) { cfg.Limits = node.Limits{MaxKeys: 1} })
	if _, err := c.Leader(nodetest.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	cl := nodetest.Client(t, c.Endpoints()...)
	ctx := nodetest.Context(t, 30*time.Second)
	tok, err := cl.Acquire(ctx, "a", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}

	bctx, end := context.WithCancel(ctx)
	overloaded := 0
	client.SetBeforeBackoff(cl, func(_ context.Context, lastErr error) {
		if !errors.Is(lastErr, client.ErrOverloaded) {
			t.Errorf("retrying after %v, want an overloaded answer", lastErr)
		}
		if overloaded++; overloaded == 3 {
			end()
		}
	})
	_, err = cl.Acquire(bctx, "b", time.Minute, 0)
	if !errors.Is(err, client.ErrOverloaded) || !errors.Is(err, context.Canceled) || overloaded != 3 {
		t.Fatalf("acquire past --max-keys: got %v after %d overloaded answers, want ErrOverloaded at the end of its context after 3", err, overloaded)
	}

	// "c" is answered overloaded, then "a" is released while it backs off.
	answered := make(chan struct{})
	var once sync.Once
	client.SetBeforeBackoff(cl, func(context.Context, error) { once.Do(func() { close(answered) }) })
	done := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(ctx, "c", time.Minute, 0)
		done <- err
	}()
	select {
	case <-answered:
	case err := <-done:
		t.Fatalf("acquire past --max-keys: %v, want it answered overloaded and retried", err)
	}
	if err := cl.Release(ctx, "a", tok.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("acquire retried after the key was released: %v", err)
	}
}

// A leader killed with an acquire waiting on it: the connection breaks
// with the request sent, and the call fails ErrOutcomeUnknown at once,
// never sent again (sent again, it would wait at the next leader behind
// the holder until its wait ran out: ErrHeld). The binary protocol's
// every answer is a frame of the member's, so a broken connection is the
// one failure that is not the member's (docs/grpc-api.md's errors for the
// API's others).
func TestLeaderKilledUnderAWaitingAcquire(t *testing.T) {
	// Rare elections: the leader must still lead when the acquire comes.
	c := nodetest.New(t, 3, nodetest.RareElections)
	leader := c.WaitLeader()
	cl := nodetest.Client(t, c.Endpoints()...)
	ctx := nodetest.Context(t, 60*time.Second)
	holder := acquire(t, ctx, cl, "k", time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(ctx, "k", time.Minute, 30*time.Second)
		done <- err
	}()
	nodetest.WaitFor(t, time.Minute, "the acquire to wait on the leader", func() bool {
		return gaugeValue(t, leader, "raftlock_waiters") == 1
	})
	c.KillMember(leader.ID())
	if err := <-done; !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("acquire waiting on a leader killed: %v, want ErrOutcomeUnknown", err)
	}
	if info, err := cl.Get(ctx, "k"); err != nil || !info.Held || info.Token != holder.Token {
		t.Fatalf("after the kill: %+v, %v; want still the holder's token %d", info, err, holder.Token)
	}
}

package grpcapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/grpcapi"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
	pb "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// grpcCluster is an in-process cluster whose members serve the API port
// as a member does: gRPC beside the HTTP/JSON API, without TLS (h2c).
type grpcCluster struct {
	*nodetest.Cluster
	addrs   map[uint64]string         // each member's API address
	clients map[uint64]pb.LocksClient // a gRPC client of each
	conns   map[uint64]*grpc.ClientConn
	apis    map[uint64]*grpcapi.API
}

func startGRPC(t *testing.T) (*grpcCluster, context.Context) {
	t.Helper()
	return startGRPCTuned(t, nil)
}

// startGRPCTuned is startGRPC with tune (nil: none) adjusting each
// member's config.
func startGRPCTuned(t *testing.T, tune func(*node.Config)) (*grpcCluster, context.Context) {
	t.Helper()
	ctx := nodetest.Context(t, 60*time.Second)
	g := &grpcCluster{addrs: map[uint64]string{}, clients: map[uint64]pb.LocksClient{}, conns: map[uint64]*grpc.ClientConn{}, apis: map[uint64]*grpcapi.API{}}
	lns := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id], g.addrs[id] = ln, ln.Addr().String()
	}
	g.Cluster = nodetest.New(t, 3, func(cfg *node.Config) {
		cfg.APIAddr = g.addrs[cfg.ID]
		if tune != nil {
			tune(cfg)
		}
	})
	for id, ln := range lns {
		api := grpcapi.New(g.Server(id), g.Node(id), server.Limits{})
		g.apis[id] = api
		srv := httpapi.NewServer(api.Handler(httpapi.New(g.Server(id), g.Node(id), server.Limits{})), server.Limits{}, slog.New(slog.DiscardHandler))
		go srv.Serve(ln)
		t.Cleanup(func() { api.Close(); srv.Close() })
		conn, err := grpc.NewClient("passthrough:///"+g.addrs[id], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		g.clients[id] = pb.NewLocksClient(conn)
		g.conns[id] = conn
	}
	g.WaitLeader()
	return g, ctx
}

// leader is the id of the member leading now, once it answers calls.
func (g *grpcCluster) leader(t *testing.T, ctx context.Context) uint64 {
	t.Helper()
	var id uint64
	nodetest.WaitFor(t, 20*time.Second, "a leader that takes calls", func() bool {
		var err error
		if id, err = g.Leader(ctx); err != nil {
			return false
		}
		_, err = g.clients[id].Get(ctx, &pb.GetRequest{Key: "probe"})
		return err == nil
	})
	return id
}

// acquire takes a lock through member id's API, failing t if it cannot.
func (g *grpcCluster) acquire(t *testing.T, ctx context.Context, id uint64, req *pb.AcquireRequest) *pb.AcquireResponse {
	t.Helper()
	a, err := g.clients[id].Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire %q on member %d: %v", req.Key, id, err)
	}
	return a
}

// expectStatus fails t unless err is a status with code and an Error
// detail named name whose message contains part.
func expectStatus(t *testing.T, what string, err error, code codes.Code, name, part string) *pb.Error {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	e := grpcapi.ErrorOf(err)
	if e == nil || e.Name != name || !strings.Contains(e.Message, part) {
		t.Fatalf("%s: detail %v, want name %q and a message with %q", what, e, name, part)
	}
	if msg := status.Convert(err).Message(); msg != name+": "+e.Message {
		t.Errorf("%s: status message %q, want the name and the detail's message", what, msg)
	}
	return e
}

// Every unary call on the leader, the errors the member answers mapped to
// their codes with the CLI's names, a follower naming the leader's API,
// and the HTTP/JSON API still served on the same port.
func TestCallsAndTheirErrors(t *testing.T) {
	g, ctx := startGRPC(t)
	id := g.leader(t, ctx)
	cl := g.clients[id]
	a, err := cl.Acquire(ctx, &pb.AcquireRequest{Key: "jobs/a", LeaseMs: 30000, Owner: "ci-1"})
	if err != nil || a.Key != "jobs/a" || a.Token == 0 || a.LeaseMs != 30000 {
		t.Fatalf("acquire: %v, %v", a, err)
	}
	_, err = cl.Acquire(ctx, &pb.AcquireRequest{Key: "jobs/a", LeaseMs: 30000, WaitMs: 50})
	expectStatus(t, "acquire of a held lock", err, codes.FailedPrecondition, "held", `"jobs/a" is held`)
	got, err := cl.Get(ctx, &pb.GetRequest{Key: "jobs/a"})
	if err != nil || !got.Held || got.Token != a.Token || got.Owner != "ci-1" || got.RemainingMs == 0 {
		t.Fatalf("get: %v, %v", got, err)
	}
	if r, err := cl.Renew(ctx, &pb.RenewRequest{Key: "jobs/a", Token: a.Token, LeaseMs: 60000}); err != nil || r.LeaseMs != 60000 {
		t.Fatalf("renew: %v, %v", r, err)
	}
	if _, err := cl.Acquire(ctx, &pb.AcquireRequest{Key: "jobs/b", LeaseMs: 30000}); err != nil {
		t.Fatal(err)
	}
	page, err := cl.List(ctx, &pb.ListRequest{Prefix: "jobs/", Limit: 1})
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "jobs/a" || !page.More || page.Next != "jobs/a" {
		t.Fatalf("list's first page: %v, %v", page, err)
	}
	if page, err = cl.List(ctx, &pb.ListRequest{Prefix: "jobs/", Limit: 1, After: page.Next}); err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "jobs/b" || page.More {
		t.Fatalf("list's second page: %v, %v", page, err)
	}
	_, err = cl.Release(ctx, &pb.ReleaseRequest{Key: "jobs/a", Token: a.Token + 100})
	expectStatus(t, "release with another token", err, codes.NotFound, "not-found", "not the holder")
	if r, err := cl.Release(ctx, &pb.ReleaseRequest{Key: "jobs/a", Token: a.Token}); err != nil || !r.Released || r.Token != a.Token {
		t.Fatalf("release: %v, %v", r, err)
	}
	if got, err := cl.Get(ctx, &pb.GetRequest{Key: "jobs/a"}); err != nil || got.Held || got.Owner != "" {
		t.Fatalf("get of a released lock: %v, %v", got, err)
	}
	_, err = cl.Acquire(ctx, &pb.AcquireRequest{Key: "jobs/x", LeaseMs: 5})
	expectStatus(t, "a 5 ms lease", err, codes.InvalidArgument, "invalid-argument", "lease must be")
	_, err = cl.Get(ctx, &pb.GetRequest{})
	expectStatus(t, "an empty key", err, codes.InvalidArgument, "invalid-argument", "key must be")
	_, err = cl.List(ctx, &pb.ListRequest{Limit: 5000})
	expectStatus(t, "a list limit of 5000", err, codes.InvalidArgument, "invalid-argument", "")
	if st, err := cl.Status(ctx, &pb.StatusRequest{}); err != nil || st.Id != id || st.Role != "leader" || len(st.Voters) != 3 {
		t.Fatalf("status: %v, %v", st, err)
	}

	// A stock stub's call on a follower is relayed to the leader.
	follower := g.Followers(g.Node(id))[0].ID()
	var fa *pb.AcquireResponse
	nodetest.WaitFor(t, 20*time.Second, "an acquire through a follower", func() bool {
		fa, err = g.clients[follower].Acquire(ctx, &pb.AcquireRequest{Key: "jobs/f", LeaseMs: 10000})
		return err == nil
	})
	if got, err := g.clients[follower].Get(ctx, &pb.GetRequest{Key: "jobs/f"}); err != nil || !got.Held || got.Token != fa.Token {
		t.Fatalf("get through a follower: %v, %v; want held with token %d", got, err, fa.Token)
	}
	_, err = g.clients[follower].Release(ctx, &pb.ReleaseRequest{Key: "jobs/f", Token: fa.Token + 1})
	expectStatus(t, "a release with another token through a follower", err, codes.NotFound, "not-found", "not the holder")
	if r, err := g.clients[follower].Release(ctx, &pb.ReleaseRequest{Key: "jobs/f", Token: fa.Token}); err != nil || !r.Released {
		t.Fatalf("release through a follower: %v, %v", r, err)
	}
	// A caller that follows redirects itself is told where the leader is.
	follows := metadata.AppendToOutgoingContext(ctx, wire.RedirectHeader, wire.RedirectFollow)
	nodetest.WaitFor(t, 20*time.Second, "the follower to know the leader's API", func() bool {
		_, err := g.clients[follower].Get(follows, &pb.GetRequest{Key: "jobs/b"})
		e := grpcapi.ErrorOf(err)
		return e != nil && e.LeaderApi != ""
	})
	_, err = g.clients[follower].Get(follows, &pb.GetRequest{Key: "jobs/b"})
	e := expectStatus(t, "get on a follower", err, codes.Unavailable, "unavailable", "not the leader")
	if e.LeaderId != id || e.LeaderApi != g.addrs[id] {
		t.Fatalf("a follower named member %d at %q, want %d at %s", e.LeaderId, e.LeaderApi, id, g.addrs[id])
	}
	if st, err := g.clients[follower].Status(ctx, &pb.StatusRequest{}); err != nil || st.Id != follower {
		t.Fatalf("status of a follower: %v, %v (every member answers for itself)", st, err)
	}

	resp, err := http.Post("http://"+g.addrs[id]+"/v1/get", "application/json", strings.NewReader(`{"key":"jobs/b"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the HTTP/JSON API beside gRPC answered %s", resp.Status)
	}
}

// KeepAlive renews a lock past its lease, ends OK when the client closes
// its side, and ends NOT_FOUND naming the lock the moment a renewal shows
// it lost (an operator forced its release); on a follower it names the
// leader.
func TestKeepAliveHoldsAndEndsWhenTheLockIsLost(t *testing.T) {
	g, ctx := startGRPC(t)
	id := g.leader(t, ctx)
	cl := g.clients[id]
	const lease = 500 // ms
	a := g.acquire(t, ctx, id, &pb.AcquireRequest{Key: "k", LeaseMs: lease})
	ka, err := cl.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&pb.KeepAliveRequest{Key: "k", Token: a.Token, LeaseMs: lease}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for n := 0; time.Since(start) < 3*lease*time.Millisecond; n++ {
		r, err := ka.Recv()
		if err != nil || r.Token != a.Token || r.LeaseMs != lease {
			t.Fatalf("renewal %d: %v, %v", n, r, err)
		}
	}
	if got, err := cl.Get(ctx, &pb.GetRequest{Key: "k"}); err != nil || !got.Held || got.Token != a.Token {
		t.Fatalf("after three leases of keep-alive: %v, %v; want held with token %d", got, err, a.Token)
	}
	ka.CloseSend()
	for {
		if _, err := ka.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("a keep-alive the client closed ended with %v, want OK", err)
		}
	}

	b, err := cl.Acquire(ctx, &pb.AcquireRequest{Key: "k2", LeaseMs: 1500})
	if err != nil {
		t.Fatal(err)
	}
	ka, err = cl.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ka.Send(&pb.KeepAliveRequest{Key: "k2", Token: b.Token, LeaseMs: 1500})
	if _, err := ka.Recv(); err != nil {
		t.Fatalf("the first renewal: %v", err)
	}
	if _, err := g.Node(id).ForceRelease(ctx, "k2", 0); err != nil {
		t.Fatal(err)
	}
	for err = nil; err == nil; _, err = ka.Recv() {
	}
	expectStatus(t, "a keep-alive of a lock forced free", err, codes.NotFound, "not-found", `lock "k2" lost`)

	// On a follower, a stock stub's keep-alive renews through the leader;
	// one that follows redirects itself is told where the leader is.
	follower := g.Followers(g.Node(id))[0].ID()
	fka, err := g.clients[follower].KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := g.acquire(t, ctx, id, &pb.AcquireRequest{Key: "k3", LeaseMs: 3000})
	fka.Send(&pb.KeepAliveRequest{Key: "k3", Token: c.Token, LeaseMs: 3000})
	if r, err := fka.Recv(); err != nil || r.Token != c.Token {
		t.Fatalf("a keep-alive through a follower: %v, %v", r, err)
	}
	fka.CloseSend()
	follows := metadata.AppendToOutgoingContext(ctx, wire.RedirectHeader, wire.RedirectFollow)
	nodetest.WaitFor(t, 20*time.Second, "a follower's keep-alive to name the leader", func() bool {
		ka, err := g.clients[follower].KeepAlive(follows)
		if err != nil {
			return false
		}
		ka.Send(&pb.KeepAliveRequest{Key: "k", Token: a.Token, LeaseMs: 3000})
		_, err = ka.Recv()
		e := grpcapi.ErrorOf(err)
		return status.Code(err) == codes.Unavailable && e != nil && e.LeaderApi == g.addrs[id]
	})
}

// A waiting acquire whose caller cancels leaves the queue (rule 7): the
// call's context ends on the member as the caller's does.
func TestWaitingAcquireLeavesWhenCancelled(t *testing.T) {
	g, ctx := startGRPC(t)
	id := g.leader(t, ctx)
	a := g.acquire(t, ctx, id, &pb.AcquireRequest{Key: "q", LeaseMs: 10000})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := g.clients[id].Acquire(wctx, &pb.AcquireRequest{Key: "q", LeaseMs: 3600000, WaitMs: 60000})
		done <- err
	}()
	waiters := func() float64 {
		var m dto.Metric
		g.Node(id).Metrics().Waiters.Write(&m)
		return m.GetGauge().GetValue()
	}
	nodetest.WaitFor(t, 10*time.Second, "the acquire to wait in the queue", func() bool { return waiters() == 1 })
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("the waiting acquire ended with %v, want CANCELED", err)
	}
	nodetest.WaitFor(t, 10*time.Second, "the waiter to leave the queue", func() bool { return waiters() == 0 })
	if _, err := g.clients[id].Release(ctx, &pb.ReleaseRequest{Key: "q", Token: a.Token}); err != nil {
		t.Fatal(err)
	}
	if got, err := g.clients[id].Get(ctx, &pb.GetRequest{Key: "q"}); err != nil || got.Held {
		t.Fatalf("after the release: %v, %v; want free (no grant to the waiter that left)", got, err)
	}
}

// A keep-alive on a member that stops leading ends UNAVAILABLE naming the
// new leader's API (the lock is not lost: keep it alive there), and one on
// a member that stops serving ends UNAVAILABLE at once.
func TestKeepAliveEndsNamingANewLeader(t *testing.T) {
	g, ctx := startGRPC(t)
	leader := g.leader(t, ctx)
	// A caller that follows redirects itself (a stock stub's keep-alive
	// is relayed to the new leader instead, TestKeepAliveHoldsAndEnds...).
	ctx = metadata.AppendToOutgoingContext(ctx, wire.RedirectHeader, wire.RedirectFollow)
	a := g.acquire(t, ctx, leader, &pb.AcquireRequest{Key: "k", LeaseMs: 3000})
	ka, err := g.clients[leader].KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ka.Send(&pb.KeepAliveRequest{Key: "k", Token: a.Token, LeaseMs: 3000})
	if _, err := ka.Recv(); err != nil {
		t.Fatal(err)
	}
	next := g.Followers(g.Node(leader))[0].ID()
	g.TransferLeader(next) // asked again until done: one try can fail on a loaded machine
	for err = nil; err == nil; _, err = ka.Recv() {
	}
	if e := expectStatus(t, "a keep-alive on a member that stopped leading", err, codes.Unavailable, "unavailable", "not the leader"); e.LeaderApi != g.addrs[next] {
		t.Fatalf("it named %q, want the new leader's API %s", e.LeaderApi, g.addrs[next])
	}
	if got, err := g.clients[next].Get(ctx, &pb.GetRequest{Key: "k"}); err != nil || !got.Held || got.Token != a.Token {
		t.Fatalf("the lock after the leader changed: %v, %v; want still held", got, err)
	}
	ka, err = g.clients[next].KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ka.Send(&pb.KeepAliveRequest{Key: "k", Token: a.Token, LeaseMs: 3000})
	if _, err := ka.Recv(); err != nil {
		t.Fatalf("a keep-alive at the new leader: %v", err)
	}
	g.apis[next].Stop()
	for err = nil; err == nil; _, err = ka.Recv() {
	}
	expectStatus(t, "a keep-alive on a member stopping", err, codes.Unavailable, "unavailable", "stopping")
}

// A watch over gRPC sees the same events at the same indexes on the
// leader and on a follower, across a change of leader; the watch of a
// member that stops ends UNAVAILABLE.
func TestWatchAcrossALeaderChange(t *testing.T) {
	g, ctx := startGRPC(t)
	leader := g.leader(t, ctx)
	follower := g.Followers(g.Node(leader))[0].ID()
	g.appliedSomething(t, ctx, follower)
	onLeader, onFollower := watch(t, ctx, g.clients[leader], "jobs/"), watch(t, ctx, g.clients[follower], "jobs/")
	a := g.acquire(t, ctx, leader, &pb.AcquireRequest{Key: "jobs/a", LeaseMs: 60000, Owner: "o"})
	g.acquire(t, ctx, leader, &pb.AcquireRequest{Key: "other", LeaseMs: 60000})
	g.TransferLeader(follower) // asked again until done: one try can fail on a loaded machine
	if id := g.leader(t, ctx); id != follower {
		t.Fatalf("member %d leads, want %d", id, follower)
	}
	if _, err := g.clients[follower].Release(ctx, &pb.ReleaseRequest{Key: "jobs/a", Token: a.Token}); err != nil {
		t.Fatal(err)
	}
	g.acquire(t, ctx, follower, &pb.AcquireRequest{Key: "jobs/b", LeaseMs: 60000})
	x, y := events(t, onLeader, 3), events(t, onFollower, 3)
	for i, want := range []struct {
		key string
		typ pb.EventType
	}{{"jobs/a", pb.EventType_EVENT_TYPE_GRANTED}, {"jobs/a", pb.EventType_EVENT_TYPE_RELEASED}, {"jobs/b", pb.EventType_EVENT_TYPE_GRANTED}} {
		if x[i].Key != want.key || x[i].Type != want.typ || x[i].Index == 0 {
			t.Fatalf("event %d on the old leader: %v, want %s %s", i, x[i], want.typ, want.key)
		}
		if x[i].String() != y[i].String() {
			t.Fatalf("the members' events differ: %v and %v", x[i], y[i])
		}
	}
	if x[0].Token != a.Token || x[0].Owner != "o" || x[2].Token <= a.Token || x[2].Index <= x[1].Index {
		t.Fatalf("events %v", x)
	}
	g.StopMember(leader)
	var end error
	for end == nil {
		_, end = onLeader.Recv()
	}
	expectStatus(t, "the watch of a stopped member", end, codes.Unavailable, "unavailable", "")
}

// watch starts a watch of prefix on cl and reads its first response.
func watch(t *testing.T, ctx context.Context, cl pb.LocksClient, prefix string) grpc.ServerStreamingClient[pb.WatchResponse] {
	t.Helper()
	w, err := cl.Watch(ctx, &pb.WatchRequest{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil || len(first.Events) != 0 || first.FromIndex == 0 {
		t.Fatalf("a watch's first response: %v, %v; want only the index it starts after", first, err)
	}
	return w
}

// appliedSomething waits until member id has applied an entry: a watch's
// first answer names the index it starts after (watch wants one), which is
// 0 on a follower that has applied nothing yet, as under load.
func (g *grpcCluster) appliedSomething(t *testing.T, ctx context.Context, id uint64) {
	t.Helper()
	for {
		st, err := g.Node(id).Status(ctx)
		if err == nil && st.Applied > 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("member %d never applied an entry", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// events reads n events from w.
func events(t *testing.T, w grpc.ServerStreamingClient[pb.WatchResponse], n int) []*pb.LockEvent {
	t.Helper()
	var got []*pb.LockEvent
	for len(got) < n {
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(got), n, err)
		}
		got = append(got, r.Events...)
	}
	return got
}

// A call that reaches a closed API (its gRPC server stopped, its port not
// yet closed, as in a member's Close) is answered UNAVAILABLE with the
// Error detail: the member took nothing, and says so, as it says every
// answer. Without the detail its caller could only take it for an unknown
// outcome.
func TestCallOnAClosedAPIIsUnavailable(t *testing.T) {
	g, ctx := startGRPC(t)
	id := g.leader(t, ctx)
	g.apis[id].Close()
	_, err := g.clients[id].Acquire(ctx, &pb.AcquireRequest{Key: "k", LeaseMs: 1000})
	expectStatus(t, "an acquire on a closed API", err, codes.Unavailable, "unavailable", "stopping")
}

// A watch resumed after the revision of the last event it read, on any
// member, gets every event after it exactly once and in order; one
// resumed past the member's history is OUT_OF_RANGE, name compacted.
func TestWatchResumesAfterARevision(t *testing.T) {
	g, ctx := startGRPCTuned(t, func(cfg *node.Config) { cfg.WatchHistory = 8 })
	id := g.leader(t, ctx)
	wctx, cancel := context.WithCancel(ctx)
	w := watch(t, wctx, g.clients[id], "w/")
	var tokens []uint64
	for i := range 2 {
		tokens = append(tokens, g.acquire(t, ctx, id, &pb.AcquireRequest{Key: fmt.Sprintf("w/%d", i), LeaseMs: 60000}).Token)
	}
	var read []*pb.LockEvent
	for len(read) < 1 {
		r, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, r.Events...)
	}
	last := read[0]
	cancel() // the connection drops after the first event
	for i := 2; i < 4; i++ {
		tokens = append(tokens, g.acquire(t, ctx, id, &pb.AcquireRequest{Key: fmt.Sprintf("w/%d", i), LeaseMs: 60000}).Token)
	}
	for _, m := range g.IDs() {
		r, err := g.clients[m].Watch(ctx, &pb.WatchRequest{Prefix: "w/", AfterIndex: last.Index, AfterSeq: last.Seq})
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for len(got) < 3 {
			resp, err := r.Recv()
			if err != nil {
				t.Fatalf("member %d: resumed watch: %v", m, err)
			}
			for _, ev := range resp.Events {
				got = append(got, ev.Token)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tokens[1:]) {
			t.Fatalf("member %d: resumed after %d.%d: tokens %v, want %v", m, last.Index, last.Seq, got, tokens[1:])
		}
	}
	// Past the history of 8 events: the first ones are gone everywhere.
	for i := 4; i < 14; i++ {
		g.acquire(t, ctx, id, &pb.AcquireRequest{Key: fmt.Sprintf("w/%d", i), LeaseMs: 60000})
	}
	r, err := g.clients[id].Watch(ctx, &pb.WatchRequest{Prefix: "w/", AfterIndex: last.Index, AfterSeq: last.Seq})
	if err == nil {
		_, err = r.Recv()
	}
	expectStatus(t, "a watch resumed past the history", err, codes.OutOfRange, "compacted", "list the locks again")
}

package grpcapi_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
	pb "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// renewBackend renews every lock and reads every key as free.
type renewBackend struct{}

func (renewBackend) Do(_ context.Context, _ string, _ uint64, req *wire.Request) *wire.Response {
	if req.Op == wire.OpRenew {
		return &wire.Response{Op: wire.OpRenewed}
	}
	return &wire.Response{Op: wire.OpValue}
}

func (renewBackend) PeerAPIAddr(uint64) string { return "" }

func (renewBackend) Watch(context.Context, string, uint64, string, wire.Revision) (*node.Watch, *wire.Response) {
	return nil, &wire.Response{Op: wire.OpUnavailable}
}

func (renewBackend) Admit(string, server.Limit) (func(), error) { return func() {}, nil }
func (renewBackend) Healthy(context.Context) error              { return nil }

// keepAlive opens a keep-alive of key with token, and reads its first
// renewal; the error is the stream's when it ends instead.
func keepAlive(ctx context.Context, cl pb.LocksClient, key string, token uint64) (grpc.BidiStreamingClient[pb.KeepAliveRequest, pb.KeepAliveResponse], error) {
	ka, err := cl.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	if err := ka.Send(&pb.KeepAliveRequest{Key: key, Token: token, LeaseMs: 3000}); err != nil {
		return nil, err
	}
	if _, err := ka.Recv(); err != nil {
		return nil, err
	}
	return ka, nil
}

// Keep-alives have a pool of their own: with all of its places taken,
// one more is refused overloaded and a unary call is still answered
// (issue 37, finding 8: 4,096 keep-alives made every call answer
// UNAVAILABLE overloaded).
func TestKeepAlivesHaveTheirOwnPool(t *testing.T) {
	lim := server.Limits{MaxConns: 2}
	cl := pb.NewLocksClient(serveFakeWith(t, renewBackend{}, lim))
	ctx := nodetest.Context(t, 20*time.Second)
	for i := range lim.MaxConns {
		if _, err := keepAlive(ctx, cl, "k", 1); err != nil {
			t.Fatalf("keep-alive %d: %v", i+1, err)
		}
	}
	_, err := keepAlive(ctx, cl, "k", 1)
	expectStatus(t, "a keep-alive past the pool", err, codes.Unavailable, wire.ErrorNameOverloaded, "keep-alive streams")
	if _, err := cl.Get(ctx, &pb.GetRequest{Key: "k"}); err != nil {
		t.Fatalf("a call beside a full pool of keep-alives: %v", err)
	}
}

// tlsClient is a gRPC client of m as the identity name.
func tlsClient(t *testing.T, m *nodetest.TLSMember, name string) pb.LocksClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+m.API, grpc.WithTransportCredentials(credentials.NewTLS(m.ClientTLS(t, name))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewLocksClient(conn)
}

// One identity's keep-alives take at most its share of calls in flight:
// the one past it is refused overloaded naming the limit and its flag,
// another identity's calls are answered, and the streams admitted go on
// renewing (each renewal runs on its stream's unit). Past its share of
// watches, an identity's watch is refused so too.
func TestKeepAlivesOfOneIdentityLeaveOthersCalls(t *testing.T) {
	lim := server.Limits{MaxConns: 16, MaxCallsPerIdentity: 8, MaxWatchesPerIdentity: 2}
	m := nodetest.StartTLSMemberWith(t, `{"rules":[
		{"identity":"alice","prefixes":["a/"],"rights":["lock","read"]},
		{"identity":"bob","prefixes":["b/"],"rights":["lock","read"]}]}`, lim, "alice", "bob")
	ctx := nodetest.Context(t, 30*time.Second)
	alice, bob := tlsClient(t, m, "alice"), tlsClient(t, m, "bob")
	var lock *pb.AcquireResponse
	nodetest.WaitFor(t, 10*time.Second, "the member to lead", func() bool {
		var err error
		lock, err = alice.Acquire(ctx, &pb.AcquireRequest{Key: "a/x", LeaseMs: 3000})
		return err == nil
	})
	var streams []grpc.BidiStreamingClient[pb.KeepAliveRequest, pb.KeepAliveResponse]
	for len(streams) < 2*lim.MaxConns {
		ka, err := keepAlive(ctx, alice, "a/x", lock.Token)
		if err != nil {
			expectStatus(t, "alice's keep-alive past her share", err, codes.Unavailable, wire.ErrorNameOverloaded, "--max-calls-per-identity")
			break
		}
		streams = append(streams, ka)
	}
	if len(streams) != lim.MaxCallsPerIdentity {
		t.Fatalf("alice opened %d keep-alives, want her share, %d", len(streams), lim.MaxCallsPerIdentity)
	}
	if _, err := bob.Acquire(ctx, &pb.AcquireRequest{Key: "b/y", LeaseMs: 3000}); err != nil {
		t.Fatalf("bob's call beside alice's keep-alives: %v", err)
	}
	for i, ka := range streams {
		if _, err := ka.Recv(); err != nil {
			t.Fatalf("alice's keep-alive %d at its second renewal: %v", i+1, err)
		}
	}

	for range lim.MaxWatchesPerIdentity {
		watch(t, ctx, alice, "a/")
	}
	w, err := alice.Watch(ctx, &pb.WatchRequest{Prefix: "a/"})
	if err == nil {
		_, err = w.Recv()
	}
	expectStatus(t, "alice's watch past her share", err, codes.Unavailable, wire.ErrorNameOverloaded, "--max-watches-per-identity")
}

// An open watch whose identity the ACL no longer lets read its prefix
// ends PERMISSION_DENIED within a second of the reload (issue 37,
// finding 7).
func TestWatchEndsWhenTheACLRevokesIt(t *testing.T) {
	m := nodetest.StartTLSMember(t, `{"rules":[
		{"identity":"alice","prefixes":["a/"],"rights":["lock","read"]},
		{"identity":"bob","prefixes":["b/"],"rights":["lock","read"]}]}`, "alice", "bob")
	ctx := nodetest.Context(t, 30*time.Second)
	alice := tlsClient(t, m, "alice")
	nodetest.WaitFor(t, 10*time.Second, "the member to lead", func() bool {
		_, err := alice.Acquire(ctx, &pb.AcquireRequest{Key: "a/x", LeaseMs: 10000})
		return err == nil
	})
	w := watch(t, ctx, alice, "a/")
	if _, err := alice.Acquire(ctx, &pb.AcquireRequest{Key: "a/y", LeaseMs: 10000}); err != nil {
		t.Fatal(err)
	}
	if got := events(t, w, 1); got[0].Key != "a/y" {
		t.Fatalf("alice's watch: %v, want the acquire of a/y", got)
	}
	start := time.Now()
	m.SetACL(t, `{"rules":[{"identity":"bob","prefixes":["b/"],"rights":["lock","read"]}]}`)
	_, err := w.Recv()
	took := time.Since(start)
	expectStatus(t, "alice's watch after the ACL removed her", err, codes.PermissionDenied, wire.ErrorNamePermissionDenied, "alice")
	if took > time.Second {
		t.Errorf("alice's watch ended %v after the reload, want within 1s", took)
	}
}

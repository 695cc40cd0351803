package grpcapi_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/raftlock/raftlock/node/nodetest"
	pb "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// Under TLS a member's gRPC API (h2 by ALPN) runs each call as the client
// certificate's identity under the member's ACL, as the client port and
// the HTTP/JSON API do: an identity without the right gets
// PERMISSION_DENIED, a caller without a certificate no connection.
func TestTLSIdentityAndACL(t *testing.T) {
	m := nodetest.StartTLSMember(t, `{"rules":[
		{"identity":"builder","prefixes":["jobs/"],"rights":["lock","read"]},
		{"identity":"reader","prefixes":[""],"rights":["read"]}]}`, "builder", "reader")
	ctx := nodetest.Context(t, 30*time.Second)
	clientAs := func(name string) pb.LocksClient {
		tc := m.ClientTLS(t, name)
		conn, err := grpc.NewClient("passthrough:///"+m.API, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewLocksClient(conn)
	}
	builder, reader := clientAs("builder"), clientAs("reader")
	nodetest.WaitFor(t, 10*time.Second, "the member to lead", func() bool {
		_, err := builder.Acquire(ctx, &pb.AcquireRequest{Key: "jobs/a", LeaseMs: 10000})
		return status.Code(err) != codes.Unavailable
	})
	if got, err := builder.Get(ctx, &pb.GetRequest{Key: "jobs/a"}); err != nil || !got.Held {
		t.Fatalf("get by builder of the lock it took: %v, %v", got, err)
	}
	_, err := builder.Acquire(ctx, &pb.AcquireRequest{Key: "other", LeaseMs: 10000})
	expectStatus(t, "builder outside its prefix", err, codes.PermissionDenied, "permission-denied", "builder")
	_, err = reader.Acquire(ctx, &pb.AcquireRequest{Key: "jobs/b", LeaseMs: 10000})
	expectStatus(t, "acquire by reader", err, codes.PermissionDenied, "permission-denied", "reader")
	if got, err := reader.Get(ctx, &pb.GetRequest{Key: "jobs/a"}); err != nil || !got.Held {
		t.Fatalf("get by reader: %v, %v", got, err)
	}
	_, err = reader.Status(ctx, &pb.StatusRequest{})
	expectStatus(t, "status without the admin right", err, codes.PermissionDenied, "permission-denied", "")
	watch(t, ctx, reader, "jobs/")
	w, err := builder.Watch(ctx, &pb.WatchRequest{Prefix: "other/"})
	if err == nil {
		_, err = w.Recv()
	}
	expectStatus(t, "a watch outside the builder's read prefixes", err, codes.PermissionDenied, "permission-denied", "")
	if _, err := clientAs("").Get(ctx, &pb.GetRequest{Key: "jobs/a"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a caller without a client certificate: %v, want no connection (UNAVAILABLE)", err)
	}
}

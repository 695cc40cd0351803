package grpcapi_test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/raftlock/raftlock/node/grpcapi"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// TestHealthFollowsTheMember: Health/Check answers SERVING on every member
// of a cluster with a leader, for the whole server and for the Locks
// service, NOT_FOUND for any other service, and NOT_SERVING on a member
// left without a quorum; a Watch sees the change.
func TestHealthFollowsTheMember(t *testing.T) {
	g, ctx := startGRPC(t)
	g.leader(t, ctx)
	for _, id := range g.IDs() {
		h := healthpb.NewHealthClient(g.conns[id])
		for _, svc := range []string{"", "raftlock.v1.Locks"} {
			var got healthpb.HealthCheckResponse_ServingStatus
			nodetest.WaitFor(t, 10*time.Second, "every member serving", func() bool {
				r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
				got = r.GetStatus()
				return err == nil && got == healthpb.HealthCheckResponse_SERVING
			})
		}
		if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
			t.Errorf("member %d: Check of an unknown service: %v, want NOT_FOUND", id, err)
		}
		list, err := h.List(ctx, &healthpb.HealthListRequest{})
		if err != nil || len(list.GetStatuses()) != 2 || list.GetStatuses()["raftlock.v1.Locks"].GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("member %d: List: %v, %v", id, list, err)
		}
	}

	// Member 1 alone: no quorum, no leader, not serving.
	h := healthpb.NewHealthClient(g.conns[1])
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := h.Watch(wctx, &healthpb.HealthCheckRequest{Service: "raftlock.v1.Locks"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := watch.Recv()
	if err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch's first answer: %v, %v; want SERVING", first, err)
	}
	g.StopMember(2)
	g.StopMember(3)
	next, err := watch.Recv()
	if err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch after the quorum was lost: %v, %v; want NOT_SERVING", next, err)
	}
	r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check without a quorum: %v, %v; want NOT_SERVING", r, err)
	}
}

// TestReflection: a generic client (grpcurl's way) lists the services
// from the server itself, and WithoutReflection turns it off.
func TestReflection(t *testing.T) {
	for _, off := range []bool{false, true} {
		var opts []grpcapi.Option
		if off {
			opts = append(opts, grpcapi.WithoutReflection())
		}
		api := grpcapi.NewWithBackend(&fakeBackend{}, server.Limits{}, opts...)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := httpapi.NewServer(api.Handler(nil), server.Limits{}, slog.New(slog.DiscardHandler))
		go srv.Serve(ln)
		conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		names, err := listServices(ctx, conn)
		cancel()
		conn.Close()
		api.Close()
		srv.Close()
		switch {
		case off && status.Code(err) != codes.Unimplemented:
			t.Errorf("WithoutReflection: ListServices: %v, %v; want UNIMPLEMENTED", names, err)
		case !off && (err != nil || !slices.Contains(names, "raftlock.v1.Locks") || !slices.Contains(names, "grpc.health.v1.Health")):
			t.Errorf("ListServices: %v, %v; want raftlock.v1.Locks and grpc.health.v1.Health", names, err)
		}
	}
}

// listServices asks conn's server reflection for its services.
func listServices(ctx context.Context, conn *grpc.ClientConn) ([]string, error) {
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

package grpcapi

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	raftlockv1 "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// The standard health service, grpc.health.v1.Health, as Kubernetes' gRPC
// probes and load balancers ask it: SERVING exactly when /healthz answers
// ok (node.Node.Healthy: the member runs, knows a leader and applies what
// is committed). The whole server ("") and raftlock.v1.Locks have the same
// status; any other service is NOT_FOUND, as the protocol says.

// healthTimeout bounds one check: a member whose loop is held up is not
// serving, and a probe that waited would time out instead of learning it.
const healthTimeout = 2 * time.Second

// healthWatchPeriod is how often a Watch asks again: the member pushes no
// health changes, so a watcher learns one within a period.
const healthWatchPeriod = time.Second

// health is the Health service of one member.
type health struct {
	healthpb.UnimplementedHealthServer
	healthy  func(context.Context) error // node.Node.Healthy
	stopping <-chan struct{}             // closed when the API stops
}

// healthServices are the service names the Health service answers for.
var healthServices = []string{"", raftlockv1.Locks_ServiceDesc.ServiceName}

func known(service string) bool {
	for _, s := range healthServices {
		if s == service {
			return true
		}
	}
	return false
}

// status asks the member once.
func (h *health) status(ctx context.Context) healthpb.HealthCheckResponse_ServingStatus {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	if h.healthy(ctx) != nil {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

// badRequest answers a request the codec could not decode (codec.go).
func badRequest(m proto.Message) error {
	if why := refused(m); why != nil {
		return status.Error(codes.InvalidArgument, why.Error())
	}
	return nil
}

func (h *health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := badRequest(req); err != nil {
		return nil, err
	}
	if !known(req.GetService()) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q: this member serves %q and the whole server (\"\")", req.GetService(), raftlockv1.Locks_ServiceDesc.ServiceName)
	}
	return &healthpb.HealthCheckResponse{Status: h.status(ctx)}, nil
}

func (h *health) List(ctx context.Context, req *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	if err := badRequest(req); err != nil {
		return nil, err
	}
	st := h.status(ctx)
	out := map[string]*healthpb.HealthCheckResponse{}
	for _, s := range healthServices {
		out[s] = &healthpb.HealthCheckResponse{Status: st}
	}
	return &healthpb.HealthListResponse{Statuses: out}, nil
}

// Watch sends the status at once and then each change, as the protocol
// says; an unknown service is SERVICE_UNKNOWN (not an error: it may be
// registered later). It ends when the caller goes or the API stops.
func (h *health) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	if err := badRequest(req); err != nil {
		return err
	}
	ctx := stream.Context()
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	tick := time.NewTicker(healthWatchPeriod)
	defer tick.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		if known(req.GetService()) {
			st = h.status(ctx)
		}
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.stopping:
			return stoppingError()
		case <-tick.C:
		}
	}
}

// Package grpcapi is a member's gRPC API, service raftlock.v1.Locks
// (proto/raftlock/v1/locks.proto, docs/grpc-api.md), served on the --api
// port beside the HTTP/JSON API: Handler sends a request whose
// Content-Type is application/grpc to the gRPC server and any other to the
// HTTP/JSON API, on the one net/http server (HTTP/2 by ALPN under TLS, by
// prior knowledge without: h2c, as gRPC clients speak it).
//
// Like package httpapi it only translates: each call becomes the client
// protocol's request (package wire) and runs through the client port's own
// dispatch, server.Server.Do, with the same ACL and the caller's identity
// taken from the same client certificate, so the protocols cannot disagree
// on a lock. A failed call's status code is mapped from the CLI's error
// name (statusOf), which an Error detail carries with the leader's API
// address when a follower answered: a follower relays a call to the leader
// (server.Forwarding), or, for a caller that sent the metadata
// raftlock-redirect: follow, answers UNAVAILABLE naming the leader, as the
// binary protocol redirects. KeepAlive renews a lock on the member every third of its lease
// and Watch streams lock events from node.Node.Watch (server.Server.Watch).
package grpcapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/server"
	raftlockv1 "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// maxMessage bounds a received message: a key, an owner and a few numbers
// fit in a few hundred bytes (the HTTP API's bodies are bounded alike).
const maxMessage = httpapi.MaxBody

// Backend is what the API runs its calls on: a member's client dispatch,
// its watches and its view of the other members' API addresses (the HTTP
// API's), and the shares of its client identities.
type Backend interface {
	httpapi.Backend
	// Healthy says why the member cannot serve, nil when it can
	// (node.Node.Healthy): the Health service's answer.
	Healthy(ctx context.Context) error
}

// memberBackend is the Backend of a running member.
type memberBackend struct {
	httpapi.Backend
	n *node.Node
}

func (m memberBackend) Healthy(ctx context.Context) error { return m.n.Healthy(ctx) }

// An Option changes how New serves.
type Option func(*options)

type options struct{ noReflection bool }

// WithoutReflection leaves out server reflection (grpc.reflection.v1),
// which New serves by default so that grpcurl and other generic tools can
// list and call the service without its .proto file.
func WithoutReflection() Option { return func(o *options) { o.noReflection = true } }

// API is the gRPC service of one member and the grpc.Server it is
// registered on.
type API struct {
	raftlockv1.UnimplementedLocksServer
	b        Backend
	srv      *grpc.Server
	metrics  *node.Metrics // nil: the refusals made here are not counted
	slots    chan struct{} // one per unary call in progress
	streams  chan struct{} // one per keep-alive in progress
	watches  chan struct{} // one per watch in progress
	stopping chan struct{} // closed by Stop: streams end
	stopOnce sync.Once
}

// New returns the gRPC API of the member whose client server is s and node
// n, within lim (the client port's limits; zero fields take their
// defaults). At most lim.MaxConns unary calls run at once (waiting
// acquires included), as many keep-alives and as many watches beside
// them, each in a pool of its own, so that streams, which last, never
// starve calls; one more is answered UNAVAILABLE, name overloaded. Each
// identity's keep-alives and watches count in its share of the member
// (server.Server.Admit) before they take a place here, so that one
// identity cannot fill a pool.
//
// Beside raftlock.v1.Locks it serves grpc.health.v1.Health (health.go)
// and, unless WithoutReflection, server reflection.
func New(s *server.Server, n *node.Node, lim server.Limits, opts ...Option) *API {
	return newAPI(memberBackend{httpapi.MemberBackend(s, n), n}, n.Metrics(), lim, opts)
}

// NewWithBackend is New on any Backend (tests), counting nothing.
func NewWithBackend(b Backend, lim server.Limits, opts ...Option) *API {
	return newAPI(b, nil, lim, opts)
}

func newAPI(b Backend, metrics *node.Metrics, lim server.Limits, opts []Option) *API {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	lim = lim.WithDefaults()
	a := &API{
		b:        b,
		metrics:  metrics,
		srv:      grpc.NewServer(grpc.MaxRecvMsgSize(maxMessage), grpc.ForceServerCodecV2(newCodec())),
		slots:    make(chan struct{}, lim.MaxConns),
		streams:  make(chan struct{}, lim.MaxConns),
		watches:  make(chan struct{}, lim.MaxConns),
		stopping: make(chan struct{}),
	}
	raftlockv1.RegisterLocksServer(a.srv, a)
	healthpb.RegisterHealthServer(a.srv, &health{healthy: b.Healthy, stopping: a.stopping})
	if !o.noReflection {
		reflection.Register(a.srv)
	}
	return a
}

// Handler serves gRPC requests (HTTP/2 with a Content-Type of
// application/grpc, or application/grpc+proto and the like) with the API
// and every other request with next, the HTTP/JSON API.
func (a *API) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsGRPC(r) {
			next.ServeHTTP(w, r)
			return
		}
		tw := &tracked{ResponseWriter: w}
		a.srv.ServeHTTP(tw, r)
		if !tw.wrote {
			// A stopped grpc.Server (Close, before the port's server
			// closes) ends a call without a word, which its caller reads
			// as UNKNOWN without the Error detail: an outcome unknown.
			// It took nothing: say so, as every answer of the member does.
			writeStatus(w, stoppingError())
		}
	})
}

// tracked is a ResponseWriter that notes whether anything was written.
type tracked struct {
	http.ResponseWriter
	wrote bool
}

func (t *tracked) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *tracked) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Flush is the http.Flusher gRPC's handler requires.
func (t *tracked) Flush() {
	t.wrote = true
	http.NewResponseController(t.ResponseWriter).Flush()
}

// writeStatus answers a gRPC call with err's status, as gRPC's own
// handler does: headers, then the status in trailers (the Error detail in
// grpc-status-details-bin), for a call the grpc.Server will not answer.
func writeStatus(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	w.WriteHeader(http.StatusOK)
	h.Set(http.TrailerPrefix+"Grpc-Status", strconv.Itoa(int(st.Code())))
	h.Set(http.TrailerPrefix+"Grpc-Message", percentEncode(st.Message()))
	if b, err := proto.Marshal(st.Proto()); err == nil {
		h.Set(http.TrailerPrefix+"Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(b))
	}
}

// percentEncode is grpc-message's encoding: bytes outside printable ASCII,
// and '%', as %XX.
func percentEncode(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < ' ' || c > '~' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// IsGRPC says whether r is a gRPC call.
func IsGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return r.ProtoMajor == 2 && (ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;"))
}

// Stop ends the streams in progress (keep-alives and watches answer
// UNAVAILABLE: the member is stopping, go on at another) and lets calls
// in progress finish, so the HTTP server's graceful Shutdown is not held
// by streams that would run forever.
func (a *API) Stop() {
	a.stopOnce.Do(func() { close(a.stopping) })
}

// Close ends everything at once: streams and calls in progress.
func (a *API) Close() {
	a.Stop()
	a.srv.Stop()
}

// identity is the caller's identity: its client certificate's (as
// server.Identity reads it), "" without one.
func identity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		return server.Identity(&ti.State)
	}
	return ""
}

// callContext is ctx marked for a follower to relay the call to the
// leader, unless the caller said in its metadata that it follows
// redirects itself (wire.RedirectHeader; server.Forwarding).
func callContext(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok && slices.ContainsFunc(md.Get(wire.RedirectHeader), func(v string) bool { return strings.EqualFold(v, wire.RedirectFollow) }) {
		return ctx
	}
	return server.Forwarding(ctx)
}

// do runs one request for the caller of ctx, in one of the call slots; nil
// when ctx ended first (nobody reads an answer). An answer other than ok
// comes back as the call's error status.
func (a *API) do(ctx context.Context, op string, req *wire.Request, ok wire.Op) (*wire.Response, error) {
	release, err := a.take(a.slots, op, "API calls")
	if err != nil {
		return nil, err
	}
	defer release()
	if req.Tag == 0 {
		req.Tag = tagOf(ctx) // the member reads it only where the protocol has one
	}
	resp := a.b.Do(callContext(ctx), identity(ctx), wire.FeaturePermissionDenied, req)
	if resp == nil {
		return nil, ctx.Err()
	}
	if resp.Op != ok {
		return nil, a.errorStatus(resp, req)
	}
	return resp, nil
}

// take takes one of slots, or answers overloaded when all are taken.
func (a *API) take(slots chan struct{}, op, what string) (release func(), err error) {
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	default:
		a.countOverloaded(op)
		return nil, overloaded(what, cap(slots))
	}
}

// countOverloaded counts a call of op refused here by a limit, as the
// member counts those it refuses.
func (a *API) countOverloaded(op string) {
	if a.metrics != nil {
		a.metrics.ClientRequests.WithLabelValues(op, "overloaded").Inc()
	}
}

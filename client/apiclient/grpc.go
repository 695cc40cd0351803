package apiclient

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	raftlockv1 "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// tagHeader is the metadata key that carries a call's tag (the member's
// grpcapi.TagHeader): the schema has no field for it.
const tagHeader = "raftlock-tag"

// GRPC is a client of the gRPC API (service raftlock.v1.Locks). It is
// safe for concurrent use; calls to one member share one HTTP/2
// connection.
type GRPC struct {
	r       *retrier
	opts    []grpc.DialOption
	relayed bool // Options.Relayed

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

// NewGRPC returns a client of the members whose API ports are endpoints
// (host:port; an http:// or https:// prefix is dropped), over TLS when
// opts.TLS is set.
func NewGRPC(endpoints []string, opts Options) (*GRPC, error) {
	r, err := newRetrier(endpoints, func(e string) string {
		if _, hostPort, found := strings.Cut(e, "://"); found {
			return hostPort
		}
		return e
	})
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithStatsHandler(sentTracker{}),
		grpc.WithDisableRetry(), // the retry loop decides, by the package's rules
		// A member killed and restarted is dialled again within a second,
		// not after gRPC's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: opts.dialTimeout(),
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
	}
	return &GRPC{r: r, opts: dial, conns: map[string]*grpc.ClientConn{}, relayed: opts.Relayed}, nil
}

// Close closes every connection; calls in flight fail.
func (c *GRPC) Close() error {
	c.mu.Lock()
	conns := c.conns
	c.conns, c.closed = map[string]*grpc.ClientConn{}, true
	c.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
	return nil
}

// AcquireWith takes r.Key (client.Client.AcquireWith), its tag recorded
// in the log.
func (c *GRPC) AcquireWith(ctx context.Context, r client.AcquireRequest) (client.Grant, error) {
	if err := validateAcquire(r); err != nil {
		return client.Grant{}, err
	}
	in := &raftlockv1.AcquireRequest{Key: r.Key, LeaseMs: uint64(r.Lease.Milliseconds()), WaitMs: uint64(max(r.Wait, 0).Milliseconds()), Owner: r.Owner}
	var out *raftlockv1.AcquireResponse
	err := c.call(ctx, r.Tag, false, func(ctx context.Context, l raftlockv1.LocksClient) (err error) {
		out, err = l.Acquire(ctx, in)
		return err
	})
	if err != nil {
		return client.Grant{}, err
	}
	return client.Grant{Token: out.GetToken(), LeaseMS: out.GetLeaseMs()}, nil
}

// RenewTagged restarts the holder's lease (client.Client.RenewTagged).
func (c *GRPC) RenewTagged(ctx context.Context, key string, token uint64, lease time.Duration, tag uint64) error {
	if err := validate(key, &lease, ""); err != nil {
		return err
	}
	in := &raftlockv1.RenewRequest{Token: token, LeaseMs: uint64(lease.Milliseconds())}
	in.Key, in.KeyBytes = keyField(key)
	return c.call(ctx, tag, false, func(ctx context.Context, l raftlockv1.LocksClient) error {
		_, err := l.Renew(ctx, in)
		return err
	})
}

// ReleaseTagged gives key up (client.Client.ReleaseTagged).
func (c *GRPC) ReleaseTagged(ctx context.Context, key string, token, tag uint64) error {
	if err := validate(key, nil, ""); err != nil {
		return err
	}
	in := &raftlockv1.ReleaseRequest{Token: token}
	in.Key, in.KeyBytes = keyField(key)
	return c.call(ctx, tag, false, func(ctx context.Context, l raftlockv1.LocksClient) error {
		_, err := l.Release(ctx, in)
		return err
	})
}

// ForceReleaseTagged frees key whatever its token (the admin right is
// needed) and returns the token it ended (client.Client.ForceRelease).
func (c *GRPC) ForceReleaseTagged(ctx context.Context, key string, tag uint64) (uint64, error) {
	if err := validate(key, nil, ""); err != nil {
		return 0, err
	}
	in := &raftlockv1.ReleaseRequest{Force: true}
	in.Key, in.KeyBytes = keyField(key)
	var token uint64
	err := c.call(ctx, tag, false, func(ctx context.Context, l raftlockv1.LocksClient) error {
		out, err := l.Release(ctx, in)
		token = out.GetToken()
		return err
	})
	return token, err
}

// Get reads key linearizably (client.Client.Get).
func (c *GRPC) Get(ctx context.Context, key string) (client.LockInfo, error) {
	if err := validate(key, nil, ""); err != nil {
		return client.LockInfo{}, err
	}
	in := &raftlockv1.GetRequest{}
	in.Key, in.KeyBytes = keyField(key)
	var out *raftlockv1.GetResponse
	err := c.call(ctx, 0, true, func(ctx context.Context, l raftlockv1.LocksClient) (err error) {
		out, err = l.Get(ctx, in)
		return err
	})
	if err != nil {
		return client.LockInfo{}, err
	}
	return client.LockInfo{Held: out.GetHeld(), Token: out.GetToken(), Owner: out.GetOwner(), RemainingMS: out.GetRemainingMs()}, nil
}

// List reads a page of the held locks linearizably (client.Client.List;
// the API has no stale read, so o.Stale reads through the leader too).
func (c *GRPC) List(ctx context.Context, o client.ListOptions) (client.LockPage, error) {
	if err := validateList(o); err != nil {
		return client.LockPage{}, err
	}
	in := &raftlockv1.ListRequest{Prefix: o.Prefix, Limit: uint64(o.Limit)}
	in.After, in.AfterBytes = keyField(o.After)
	var out *raftlockv1.ListResponse
	err := c.call(ctx, 0, true, func(ctx context.Context, l raftlockv1.LocksClient) (err error) {
		out, err = l.List(ctx, in)
		return err
	})
	if err != nil {
		return client.LockPage{}, err
	}
	page := client.LockPage{Locks: make([]client.HeldLock, len(out.GetLocks())), More: out.GetMore()}
	for i, l := range out.GetLocks() {
		page.Locks[i] = client.HeldLock{Key: l.GetKey(), Token: l.GetToken(), Owner: l.GetOwner(), RemainingMS: l.GetRemainingMs()}
		if kb := l.GetKeyBytes(); len(kb) > 0 {
			page.Locks[i].Key = string(kb) // a key stored before the key rule, not UTF-8
		}
	}
	return page, nil
}

// keyField is k as a message's string field, or as its bytes field when k
// is not UTF-8 (a key stored before the key rule): a protobuf string
// cannot carry it.
func keyField(k string) (string, []byte) {
	if utf8.ValidString(k) {
		return k, nil
	}
	return "", []byte(k)
}

// call runs rpc on the leader, retrying as the package says; tag, when not
// 0, goes with it as metadata.
func (c *GRPC) call(ctx context.Context, tag uint64, idempotent bool, rpc func(context.Context, raftlockv1.LocksClient) error) error {
	// This client follows a follower's redirect itself: one hop fewer
	// than the follower relaying the call.
	if !c.relayed {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.RedirectHeader, wire.RedirectFollow)
	}
	if tag != 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, tagHeader, strconv.FormatUint(tag, 10))
	}
	return c.r.do(ctx, idempotent, func(ctx context.Context, target string) attempt {
		cc, err := c.conn(target)
		if err != nil {
			return attempt{err: err} // a bad address, or closed: no retry cures it
		}
		var sent atomic.Bool
		err = rpc(context.WithValue(ctx, sentKey{}, &sent), raftlockv1.NewLocksClient(cc))
		if err == nil {
			return attempt{}
		}
		e := ErrorDetail(err)
		switch {
		case e == nil:
			// No answer of the API's, whatever its code (UNAVAILABLE
			// included): the connection failed, something between answered,
			// or the call's deadline passed, perhaps after the member took it.
			return attempt{err: err, failed: true, sent: sent.Load()}
		case e.GetLeaderApi() != "":
			return attempt{redirect: e.GetLeaderApi()}
		}
		err, retry := errorOf(e.GetName(), e.GetMessage())
		overloaded := e.GetName() == wire.ErrorNameOverloaded
		return attempt{err: err, overloaded: retry && overloaded, unavailable: retry && !overloaded}
	})
}

// conn is the connection to the member at addr, made on first use.
func (c *GRPC) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, client.ErrClosed
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, c.opts...)
	if err != nil {
		return nil, fmt.Errorf("gRPC client of %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// ErrorDetail is the gRPC API's Error detail of err, a call's status: its
// error name and, from a follower, the leader's API address; nil when it
// has none (a failure of the connection, not an answer).
func ErrorDetail(err error) *raftlockv1.Error {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if e, ok := d.(*raftlockv1.Error); ok {
			return e
		}
	}
	return nil
}

// sentKey is the context key of a call's "sent" flag, which sentTracker
// sets once the request message went to the transport: from then on the
// member may have taken it.
type sentKey struct{}

// sentTracker is a stats.Handler that marks a call sent at its first
// outgoing message, and not sent again when gRPC starts a transparent
// retry: it makes one only of an attempt the member never read (a stream
// it refused, as a stopping member refuses new ones, or one that never
// left), so that attempt did nothing.
type sentTracker struct{}

func (sentTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (sentTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	sent, ok := ctx.Value(sentKey{}).(*atomic.Bool)
	if !ok {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		if s.IsTransparentRetryAttempt {
			sent.Store(false)
		}
	case *stats.OutPayload:
		sent.Store(true)
	}
}

func (sentTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (sentTracker) HandleConn(context.Context, stats.ConnStats) {}

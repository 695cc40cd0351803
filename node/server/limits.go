package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// Limits bound what one member's client port holds. Zero fields take the
// defaults.
type Limits struct {
	// MaxConns bounds the open client connections; one more is closed
	// before the greeting, which a client takes as "not sent" and retries.
	MaxConns int
	// MaxInflightPerConn bounds the requests one connection may have
	// open, twice over: waiting acquires (past the bound the next one is
	// answered overloaded at once), and everything else (past the bound
	// the member stops reading the connection until answers go out, and
	// TCP pushes back on the client). Waiting acquires must never stop
	// the reading: the release they wait for may come on the same
	// connection.
	MaxInflightPerConn int

	// MaxPendingConns bounds the connections still in their TLS handshake
	// or greeting, and MaxPendingConnsPerAddress those of one remote
	// address. They hold no place under MaxConns. Past either bound the
	// oldest such connection (of that address) is closed, not the new
	// one: a flood of idle connections cannot keep a client out, since a
	// real client's handshake completes long before it is the oldest.
	MaxPendingConns           int
	MaxPendingConnsPerAddress int
	// HandshakeTimeout bounds a connection's TLS handshake and greeting.
	HandshakeTimeout time.Duration
	// IdleTimeout is how long a greeted connection with nothing in flight
	// (no call, no watch) stays open: then the member sends it a goaway
	// (its client dials again for its next call), and closes it if it
	// stays idle as long again.
	IdleTimeout time.Duration

	// Per client identity (a TLS client certificate's; see quota): its
	// greeted connections, its calls in flight over every API, its open
	// watches, and its waiting acquires on one key. Each is a share of a
	// bound all identities share, so that one cannot shut out the others;
	// by default a quarter of it (MaxConns/4; min(256, MaxWatches/4);
	// the node's MaxWaitersPerKey/4, which embed sets, else
	// DefaultMaxWaitersPerKeyPerIdentity).
	MaxConnsPerIdentity         int
	MaxCallsPerIdentity         int
	MaxWatchesPerIdentity       int
	MaxWaitersPerKeyPerIdentity int
	// MaxWatches bounds the watches open on this member over every API:
	// every applied event is matched against each.
	MaxWatches int
}

// Defaults of Limits (README, Limits).
const (
	DefaultMaxConns                    = 4096
	DefaultMaxInflightPerConn          = 1024
	DefaultMaxPendingConns             = 1024
	DefaultMaxPendingConnsPerAddress   = 256
	DefaultHandshakeTimeout            = 5 * time.Second
	DefaultIdleTimeout                 = 5 * time.Minute
	DefaultMaxConnsPerIdentity         = DefaultMaxConns / 4
	DefaultMaxCallsPerIdentity         = 1024
	DefaultMaxWatchesPerIdentity       = 256
	DefaultMaxWaitersPerKeyPerIdentity = node.DefaultMaxWaitersPerKey / 4
	DefaultMaxWatches                  = 8192
)

func (l *Limits) setDefaults() {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxInflightPerConn <= 0 {
		l.MaxInflightPerConn = DefaultMaxInflightPerConn
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxPendingConns, DefaultMaxPendingConns)
	def(&l.MaxPendingConnsPerAddress, DefaultMaxPendingConnsPerAddress)
	def(&l.MaxWatches, DefaultMaxWatches)
	// A share follows the bound it is a share of: with --max-connections
	// 200, a default share of 1024 would let one identity take them all.
	def(&l.MaxConnsPerIdentity, max(1, l.MaxConns/4))
	def(&l.MaxCallsPerIdentity, DefaultMaxCallsPerIdentity)
	def(&l.MaxWatchesPerIdentity, max(1, min(DefaultMaxWatchesPerIdentity, l.MaxWatches/4)))
	def(&l.MaxWaitersPerKeyPerIdentity, DefaultMaxWaitersPerKeyPerIdentity)
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
}

// limiter is a Server's limits and the state they need.
type limiter struct {
	Limits
	refusedWarn rateLimit // refused connections' log lines
	greetWarn   rateLimit // failed greetings' log lines
}

// rateLimit lets something happen at most once per interval.
type rateLimit struct{ last atomic.Int64 }

// every runs f unless it ran less than d ago.
func (r *rateLimit) every(d time.Duration, f func()) {
	now := time.Now().UnixNano()
	if last := r.last.Load(); now-last > int64(d) && r.last.CompareAndSwap(last, now) {
		f()
	}
}

// SetLimits sets the client port's limits; call it before Serve.
func (s *Server) SetLimits(l Limits) {
	l.setDefaults()
	s.lim.Limits = l
}

func (s *Server) limits() Limits { return s.lim.Limits.WithDefaults() }

// WithDefaults is l with the defaults (Default*) in place of its zero
// fields: what a member serving l enforces.
func (l Limits) WithDefaults() Limits {
	l.setDefaults()
	return l
}

// connSlots are one connection's in-flight bounds (Limits.MaxInflightPerConn).
type connSlots struct {
	waits, others chan struct{}
}

func newConnSlots(n int) connSlots {
	return connSlots{waits: make(chan struct{}, n), others: make(chan struct{}, n)}
}

// take reserves a slot for req and returns its release. A waiting acquire
// gets one at once or an error wrapping ErrOverloaded; any other request
// waits for a slot until ctx ends.
func (cs connSlots) take(ctx context.Context, req *wire.Request) (func(), error) {
	if req.Op == wire.OpAcquire && req.WaitMS > 0 {
		select {
		case cs.waits <- struct{}{}:
			return func() { <-cs.waits }, nil
		default:
			return nil, fmt.Errorf("%w: %d waiting acquires open on this connection (limit %d)", node.ErrOverloaded, cap(cs.waits), cap(cs.waits))
		}
	}
	select {
	case cs.others <- struct{}{}:
		return func() { <-cs.others }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// answerOverloaded answers request id with err (a limit of this
// connection), counted like every other overloaded answer.
func (s *Server) answerOverloaded(out *wire.Writer, id uint64, err error) {
	s.node.Metrics().ClientRequests.WithLabelValues(member.OpAcquire.String(), "overloaded").Inc()
	resp := &wire.Response{ID: id, Op: wire.OpOverloaded, Reason: err.Error()}
	out.Write(func(b []byte) []byte { return wire.AppendResponse(b, resp) })
}

package server

import (
	"context"
	"fmt"
	"net"
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
}

// Defaults of Limits (README, Limits).
const (
	DefaultMaxConns           = 4096
	DefaultMaxInflightPerConn = 1024
)

func (l *Limits) setDefaults() {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxInflightPerConn <= 0 {
		l.MaxInflightPerConn = DefaultMaxInflightPerConn
	}
}

// limiter is a Server's limits and the state they need.
type limiter struct {
	Limits
	lastWarn atomic.Int64 // unix nanoseconds of the last "too many connections" warning
}

// SetLimits sets the client port's limits; call it before Serve.
func (s *Server) SetLimits(l Limits) {
	l.setDefaults()
	s.lim.Limits = l
}

func (s *Server) limits() Limits {
	l := s.lim.Limits
	l.setDefaults()
	return l
}

// fullLocked says whether the connection limit is reached; s.mu held.
func (s *Server) fullLocked() bool { return len(s.conns) >= s.limits().MaxConns }

// refuseConn closes a connection past the limit, warning at most once a
// second.
func (s *Server) refuseConn(c net.Conn) {
	c.Close()
	s.node.Metrics().ClientRequests.WithLabelValues("connect", "overloaded").Inc()
	now := time.Now().UnixNano()
	if last := s.lim.lastWarn.Load(); now-last > int64(time.Second) && s.lim.lastWarn.CompareAndSwap(last, now) {
		s.log.Warn("refused client connection: too many connections", "limit", s.limits().MaxConns, "remote", c.RemoteAddr().String())
	}
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

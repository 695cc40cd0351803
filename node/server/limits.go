package server

import (
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"
)

// Limits bound what one member's client port holds. Zero fields take the
// defaults.
type Limits struct {
	// MaxConns bounds the open client connections; one more is closed
	// before the greeting, which a client takes as "not sent" and retries.
	MaxConns int
	// MaxInflightPerConn bounds the requests one connection may have
	// open; past it the member stops reading that connection until
	// answers go out (TCP pushes back on the client).
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

// refuse closes a connection past the limit, warning at most once a
// second.
func (s *Server) refuse(c net.Conn) {
	c.Close()
	s.node.Metrics().ClientRequests.WithLabelValues("connect", "overloaded").Inc()
	now := time.Now().UnixNano()
	if last := s.lim.lastWarn.Load(); now-last > int64(time.Second) && s.lim.lastWarn.CompareAndSwap(last, now) {
		s.log.Warn("refused client connection: too many connections", "limit", s.limits().MaxConns, "remote", c.RemoteAddr().String())
	}
}

// DebugHandlers adds Go's /debug/pprof profiles to mux. A member serves
// them only with `raftlock node --debug`: a profile costs CPU and shows
// the member's internals to whoever reaches the HTTP port.
func DebugHandlers(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

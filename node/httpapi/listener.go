package httpapi

import (
	"net"
	"net/http"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/server"
)

// CountAccepts is ln, with each failed Accept counted in
// m.AcceptErrors under the label name ("api", "http"). The error goes
// back unchanged: http.Server.Serve retries those that are temporary (out
// of file descriptors, EMFILE, among them) with a backoff, logging each,
// and returns on any other; the count shows a member that keeps hitting
// them. m nil: ln as it is.
func CountAccepts(ln net.Listener, m *node.Metrics, name string) net.Listener {
	if m == nil {
		return ln
	}
	return &countingListener{Listener: ln, m: m, name: name}
}

type countingListener struct {
	net.Listener
	m    *node.Metrics
	name string
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		l.m.AcceptErrors.WithLabelValues(l.name).Inc()
	}
	return c, err
}

// LimitPending bounds srv's connections that have not yet sent a request
// (server.PendingPool, by lim's pending-connection limits): past a bound
// the oldest is closed, counted in m.ConnectionsRefused under the label
// name. A connection leaves the pool at its first request, or when it
// closes.
func LimitPending(srv *http.Server, lim server.Limits, m *node.Metrics, name string) {
	var evicted func(string)
	if m != nil {
		evicted = func(limit string) { m.ConnectionsRefused.WithLabelValues(name, limit).Inc() }
	}
	pool := server.NewPendingPool(lim, evicted)
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			pool.Add(c)
		} else {
			pool.Remove(c)
		}
		if next != nil {
			next(c, st)
		}
	}
}

package httpapi

import (
	"net"

	"github.com/raftlock/raftlock/node"
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

package peer

import (
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Inbound connections on the peer port go through two stages. Until its
// TLS handshake and its hello's checks (checkSender, checkIdentity) pass, a
// connection is pending: anyone who reaches the port can open one, so it
// holds no member's slot, only a place in the pending pool, which is
// bounded overall and per remote address and, when full, makes room by
// closing its oldest connection (preferring one that has sent nothing)
// rather than refusing the newest. A flood of idle connections then
// cannot keep a real member's fresh connection out, even on loopback where
// the members and the flood share one address; and a pending connection
// has HelloTimeout to finish, so the flood's connections also end by
// themselves. Past its hello, a stream counts against its member's bound
// (MaxStreamsPerMember); a member has one message stream to each peer, so
// more means stale streams its sender abandoned for new ones, and the
// oldest gives way.

// Defaults of the inbound limits (Config).
const (
	// DefaultHelloTimeout is how long a pending peer connection has to
	// complete its TLS handshake and send its hello (Config.HelloTimeout).
	// A member does both in one round trip or two.
	DefaultHelloTimeout = 2 * time.Second
	// DefaultMaxPending bounds the pending peer connections of all
	// remote addresses together (Config.MaxPending).
	DefaultMaxPending = 256
	// DefaultMaxPendingPerAddress bounds the pending peer connections of
	// one remote IP address (Config.MaxPendingPerAddress).
	DefaultMaxPendingPerAddress = 64
	// DefaultMaxStreamsPerMember bounds the message streams open from one
	// member past their hello (Config.MaxStreamsPerMember); a snapshot
	// stream is bounded apart (one per member).
	DefaultMaxStreamsPerMember = 4
)

// The limits Config.OnRefused names when one closes a connection.
const (
	// LimitPending: the oldest pending connection was closed to make
	// room when MaxPending were pending.
	LimitPending = "pre_handshake"
	// LimitPendingPerAddress: as LimitPending, among the connections of
	// one remote address (MaxPendingPerAddress).
	LimitPendingPerAddress = "pre_handshake_per_address"
	// LimitHelloTimeout: a pending connection did not complete its
	// handshake and hello within HelloTimeout.
	LimitHelloTimeout = "pre_handshake_timeout"
	// LimitStreamsPerMember: a member's oldest message stream was closed
	// when it opened one more than MaxStreamsPerMember.
	LimitStreamsPerMember = "streams_per_member"
)

// pendingConn is an inbound connection before its hello passed.
type pendingConn struct {
	raw     net.Conn // the TCP connection: closing it evicts
	host    string   // the remote IP address
	spoke   atomic.Bool
	evicted atomic.Bool
}

// spokeConn marks its pendingConn as having sent something at the first
// byte read: a member sends its TLS client hello or its peer hello at
// once, an idle flood nothing, so eviction takes the silent ones first.
type spokeConn struct {
	net.Conn
	pc *pendingConn
}

func (c spokeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.pc.spoke.Load() {
		c.pc.spoke.Store(true)
	}
	return n, err
}

// pendingPool holds the pending connections, oldest first. Safe for
// concurrent use.
type pendingPool struct {
	max, maxPerHost int

	mu      sync.Mutex
	conns   []*pendingConn
	perHost map[string]int
}

func newPendingPool(max, maxPerHost int) *pendingPool {
	return &pendingPool{max: max, maxPerHost: maxPerHost, perHost: map[string]int{}}
}

// add admits pc, and returns the connection it evicts to make room (nil
// when there was room) with the limit that was reached. The caller
// closes the evicted connection.
func (p *pendingPool) add(pc *pendingConn) (evicted *pendingConn, limit string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.perHost[pc.host] >= p.maxPerHost:
		evicted, limit = p.evictLocked(pc.host), LimitPendingPerAddress
	case len(p.conns) >= p.max:
		evicted, limit = p.evictLocked(""), LimitPending
	}
	p.conns = append(p.conns, pc)
	p.perHost[pc.host]++
	return evicted, limit
}

func (pc *pendingConn) matches(host string) bool { return host == "" || pc.host == host }

// evictLocked removes the oldest connection of host ("": of any host)
// that has sent nothing yet, else the oldest of host, and returns it.
func (p *pendingPool) evictLocked(host string) *pendingConn {
	victim := -1
	for i, pc := range p.conns {
		if !pc.matches(host) {
			continue
		}
		if victim < 0 {
			victim = i // the oldest, unless a silent one follows
		}
		if !pc.spoke.Load() {
			victim = i
			break
		}
	}
	if victim < 0 {
		return nil
	}
	pc := p.conns[victim]
	p.removeAtLocked(victim)
	pc.evicted.Store(true)
	return pc
}

// remove takes pc out of the pool; false when it was not in it (evicted,
// or removed before).
func (p *pendingPool) remove(pc *pendingConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.conns, pc)
	if i < 0 {
		return false
	}
	p.removeAtLocked(i)
	return true
}

func (p *pendingPool) removeAtLocked(i int) {
	host := p.conns[i].host
	p.conns = slices.Delete(p.conns, i, i+1)
	if p.perHost[host]--; p.perHost[host] <= 0 {
		delete(p.perHost, host)
	}
}

// len is how many connections are pending.
func (p *pendingPool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// remoteHost is the IP address of c's remote end (the whole address when
// it has no port).
func remoteHost(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// inStream is a stream from a member past its hello.
type inStream struct {
	raw      net.Conn // the TCP connection: closing it ends the stream
	snapshot bool     // a snapshot stream: bounded by snapIn, not by MaxStreamsPerMember
}

// refused reports a connection closed by limit.
func (t *TCP) refused(limit string) {
	if t.onRefused != nil {
		t.onRefused(limit)
	}
}

package server

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// pendingConns are the client connections still in their TLS handshake
// or greeting (Limits.MaxPendingConns). They hold no place under
// MaxConns: a connection counts there, and against its identity's share,
// only once its greeting is done, so that connections that never greet
// (a flood of idle TCP connections, no certificate needed) cannot keep a
// real client out. Past a bound the oldest pending connection goes, not
// the new one: a real client's greeting takes milliseconds, so a flood
// must outpace it to evict it, while refusing the newest would let a few
// hundred idle connections refuse everyone for their whole deadline.
type pendingConns struct {
	mu     sync.Mutex
	seq    uint64
	conns  map[net.Conn]pendingConn
	byAddr map[string]int
}

type pendingConn struct {
	addr string
	seq  uint64
}

// remoteHost is the address a connection counts under: its IP, so that
// the ports of one host count together.
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

// add counts c as pending and returns the connections it evicts, which the
// caller closes, with the bound each ran into.
func (p *pendingConns) add(c net.Conn, max, maxPerAddr int) (evicted []net.Conn, why []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns, p.byAddr = map[net.Conn]pendingConn{}, map[string]int{}
	}
	addr := remoteHost(c)
	if p.byAddr[addr] >= maxPerAddr {
		if old := p.oldestLocked(addr); old != nil {
			p.removeLocked(old)
			evicted, why = append(evicted, old), append(why, "pending_per_address")
		}
	}
	if len(p.conns) >= max {
		if old := p.oldestLocked(""); old != nil {
			p.removeLocked(old)
			evicted, why = append(evicted, old), append(why, "pending")
		}
	}
	p.seq++
	p.conns[c] = pendingConn{addr, p.seq}
	p.byAddr[addr]++
	return evicted, why
}

// oldestLocked is the oldest pending connection from addr ("": from
// anywhere). A scan: it runs only when a bound is reached, over at most
// MaxPendingConns entries.
func (p *pendingConns) oldestLocked(addr string) net.Conn {
	var old net.Conn
	var seq uint64
	for c, pc := range p.conns {
		if (addr == "" || pc.addr == addr) && (old == nil || pc.seq < seq) {
			old, seq = c, pc.seq
		}
	}
	return old
}

// remove ends c's pending time; false when it was evicted meanwhile.
func (p *pendingConns) remove(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removeLocked(c)
}

func (p *pendingConns) removeLocked(c net.Conn) bool {
	pc, ok := p.conns[c]
	if !ok {
		return false
	}
	delete(p.conns, c)
	if p.byAddr[pc.addr]--; p.byAddr[pc.addr] <= 0 {
		delete(p.byAddr, pc.addr)
	}
	return true
}

// admitPending counts a just-accepted connection as pending, closing
// whatever it evicts.
func (s *Server) admitPending(c net.Conn) {
	l := s.limits()
	evicted, why := s.pending.add(c, l.MaxPendingConns, l.MaxPendingConnsPerAddress)
	for i, old := range evicted {
		old.Close()
		s.node.Metrics().ConnectionsRefused.WithLabelValues("client", why[i]).Inc()
		s.warnRefused("closed the oldest client connection still in its handshake: too many", "limit", why[i], "remote", old.RemoteAddr().String())
	}
}

// admitGreeted moves c, whose client has greeted as identity who, from
// pending to greeted, within MaxConns and who's share of it; false (and a
// refusal counted) when it may not stay. release gives its places back.
func (s *Server) admitGreeted(c net.Conn, who string) (release func(), ok bool) {
	if !s.pending.remove(c) {
		return nil, false // evicted meanwhile: closed already
	}
	s.mu.Lock()
	if s.greeted >= s.limits().MaxConns {
		s.mu.Unlock()
		s.node.Metrics().ConnectionsRefused.WithLabelValues("client", "connections").Inc()
		s.warnRefused("refused client connection: too many connections", "limit", s.limits().MaxConns, "remote", c.RemoteAddr().String())
		return nil, false
	}
	s.greeted++
	s.mu.Unlock()
	unplace := func() {
		s.mu.Lock()
		s.greeted--
		s.mu.Unlock()
	}
	share, err := s.Admit(who, LimitConns)
	if err != nil {
		unplace()
		s.node.Metrics().ConnectionsRefused.WithLabelValues("client", "connections_per_identity").Inc()
		s.warnRefused("refused client connection", "reason", err.Error(), "remote", c.RemoteAddr().String())
		return nil, false
	}
	return func() { share(); unplace() }, true
}

// warnRefused logs a refusal at most once a second: a flood would
// otherwise write a line per connection.
func (s *Server) warnRefused(msg string, args ...any) {
	s.lim.refusedWarn.every(time.Second, func() { s.log.Warn(msg, args...) })
}

// acceptBackoff paces a listener whose accepts fail (out of file
// descriptors, say) and tells the node when they keep failing, so that
// /healthz says so, and when they work again.
type acceptBackoff struct {
	delay        time.Duration
	failingSince time.Time
	reported     bool
}

// acceptFailing is how long accepts must keep failing before /healthz
// says the listener cannot accept: a burst of EMFILE that clears at once
// is not an outage.
const acceptFailing = 2 * time.Second

// failed records a failed accept of the listener name, and waits before
// the next (5 ms doubling to 1 s, as net/http's Serve does).
func (s *Server) acceptFailed(b *acceptBackoff, name string, err error) {
	s.node.Metrics().AcceptErrors.WithLabelValues(name).Inc()
	now := time.Now()
	if b.failingSince.IsZero() {
		b.failingSince = now
	}
	if now.Sub(b.failingSince) >= acceptFailing && !b.reported {
		b.reported = true
		s.node.ReportListener(name, err)
	}
	b.delay = min(max(2*b.delay, 5*time.Millisecond), time.Second)
	s.warnRefused("accepting a client connection failed; trying again", "err", err, "retry_in", b.delay)
	time.Sleep(b.delay)
}

// accepted clears a listener's failures once an accept succeeds.
func (s *Server) accepted(b *acceptBackoff, name string) {
	if b.failingSince.IsZero() {
		return
	}
	if b.reported {
		s.node.ReportListener(name, nil)
		s.log.Info("accepting client connections again")
	}
	*b = acceptBackoff{}
}

// idleTimer sends a goaway to a greeted connection that has had nothing
// in flight for Limits.IdleTimeout, and closes it if it stays idle as long
// again: its client dials again for its next call, and a connection
// nobody uses stops holding a place under MaxConns and its identity's
// share.
type idleTimer struct {
	inflight   atomic.Int64 // calls and watches open
	lastActive atomic.Int64 // unix nanoseconds of the last call's start or end
	toldAway   bool         // under the timer's own goroutine
}

func (t *idleTimer) touch() { t.lastActive.Store(time.Now().UnixNano()) }

// start counts a call or watch opening; the returned func ends it.
func (t *idleTimer) start() func() {
	t.inflight.Add(1)
	t.touch()
	return func() {
		t.touch()
		t.inflight.Add(-1)
	}
}

// watchIdle runs cc's idle timer until ctx ends.
func (cc *clientConn) watchIdle(idle time.Duration, goAway func()) {
	t := &cc.idle
	t.touch()
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-cc.ctx.Done():
			return
		case <-timer.C:
		}
		quiet := time.Since(time.Unix(0, t.lastActive.Load()))
		if t.inflight.Load() > 0 || quiet < idle {
			timer.Reset(max(idle-quiet, idle/10))
			continue
		}
		if !t.toldAway {
			t.toldAway = true
			goAway()
			timer.Reset(idle)
			continue
		}
		cc.s.node.Metrics().ConnectionsRefused.WithLabelValues("client", "idle").Inc()
		cc.c.Close()
		return
	}
}

// PendingPool bounds the connections of an HTTP port (the API's, the
// HTTP port's) that have not yet sent a request: their TLS handshake and
// first headers. As the client port's pending pool, its oldest go first
// past MaxPendingConns, or past MaxPendingConnsPerAddress for one
// address, so that connections that never speak hold neither file
// descriptors nor goroutines for long, and cannot keep a caller out.
type PendingPool struct {
	pool         pendingConns
	max, perAddr int
	evicted      func(limit string)
}

// NewPendingPool is a pool bounded by lim's MaxPendingConns and
// MaxPendingConnsPerAddress; evicted, if set, counts each connection it
// closes, by the bound it ran into.
func NewPendingPool(lim Limits, evicted func(limit string)) *PendingPool {
	lim = lim.WithDefaults()
	return &PendingPool{max: lim.MaxPendingConns, perAddr: lim.MaxPendingConnsPerAddress, evicted: evicted}
}

// Add counts c, just accepted, as pending, closing what it evicts.
func (pp *PendingPool) Add(c net.Conn) {
	old, why := pp.pool.add(c, pp.max, pp.perAddr)
	for i, o := range old {
		o.Close()
		if pp.evicted != nil {
			pp.evicted(why[i])
		}
	}
}

// Remove ends c's pending time (it sent a request, or closed).
func (pp *PendingPool) Remove(c net.Conn) { pp.pool.remove(c) }

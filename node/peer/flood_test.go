package peer

import (
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
)

// refusalCounter counts what Config.OnRefused reports, by limit.
type refusalCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusalCounter) add(limit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[limit]++
}

func (r *refusalCounter) get(limit string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[limit]
}

// flood holds n idle TCP connections to addr until the test ends, dialling
// again (after a short pause) each one the member closes, as someone
// without a certificate who wants the port full would. It returns how
// many connections it has opened so far.
func flood(t *testing.T, addr string, n int) func() int64 {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var dials atomic.Int64
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					dials.Add(1)
					go func() { <-stop; c.Close() }()
					var b [1]byte
					c.Read(b[:]) // until the member closes it (or stop does)
					c.Close()
				}
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	return dials.Load
}

// More idle connections than every pending cap, held and redialled from
// the members' own address (loopback): a real member's new stream still
// gets past its hello and delivers, because a pending connection holds no
// member's slot and the pool makes room by closing its oldest silent
// connection. Plain TCP and TLS alike.
func TestIdleFloodDoesNotKeepAMemberOut(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			peers := freeport.ForIDs(t, 1, 2, 3)
			var dir string
			if secure {
				dir = certs(t)
			}
			withTLS := func(id string) func(*Config) {
				return func(cfg *Config) {
					if secure {
						cfg.TLS = load(t, dir, id)
					}
				}
			}
			var refusals refusalCounter
			caps := func(cfg *Config) {
				cfg.MaxPending, cfg.MaxPendingPerAddress = 8, 4
				cfg.HelloTimeout = time.Minute // only the caps make room here
				cfg.OnRefused = refusals.add
			}
			m1, rec1 := startMember(t, 1, peers, 0xf100d, caps, withTLS("member-1"))
			dials := flood(t, m1.listenAddr, 40)
			eventually(t, "the flood to fill the pending pool", func() {}, func() bool {
				return dials() >= 40 && refusals.get(LimitPendingPerAddress) > 0
			})
			m2, _ := startMember(t, 2, peers, 0xf100d, withTLS("member-2"))
			eventually(t, "member 2's heartbeats through the flood", func() { m2.Send(heartbeatMsg(2, 1)) }, func() bool { return rec1.from(2) > 0 })
			if n := m1.pending.len(); n > 4 {
				t.Errorf("%d connections pending from one address, cap 4", n)
			}
		})
	}
}

// A member's message streams past their hello are bounded: one more
// closes its oldest (a stream its sender gave up on), never the newest.
func TestStreamsPerMemberAreBounded(t *testing.T) {
	peers := freeport.ForIDs(t, 1, 2, 3)
	var refusals refusalCounter
	m1, rec1 := startMember(t, 1, peers, 0x5eed, withReadTimeout(time.Minute), func(cfg *Config) {
		cfg.MaxStreamsPerMember = 2
		cfg.OnRefused = refusals.add
	})
	var streams []net.Conn
	for i := range 3 {
		c, err := net.Dial("tcp", m1.listenAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(rawHello(2, 1, 0x5eed, ""))
		streams = append(streams, c)
		eventually(t, "the stream's heartbeat", func() {}, func() bool { return rec1.from(2) > i })
	}
	if !closedWithin(streams[0], 5*time.Second) {
		t.Fatal("the oldest of three streams from member 2 stayed open past the bound of 2")
	}
	for i, c := range streams[1:] {
		if closedWithin(c, 100*time.Millisecond) {
			t.Fatalf("stream %d of member 2, within the bound, was closed", i+2)
		}
	}
	if n := refusals.get(LimitStreamsPerMember); n != 1 {
		t.Fatalf("%d refusals counted for streams_per_member, want 1", n)
	}
}

// failingListener fails every accept while failing is set, as a listener
// out of file descriptors does.
type failingListener struct {
	net.Listener
	failing atomic.Bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.failing.Load() {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// The accept loop outlives failing accepts: it retries with a backoff,
// counts each failure, ListenerErr reports failures that last, and once
// accepts work again the member is reachable and ListenerErr is nil.
func TestAcceptSurvivesErrors(t *testing.T) {
	peers := freeport.ForIDs(t, 1, 2, 3)
	fl := &failingListener{}
	fl.failing.Store(true)
	var acceptErrors atomic.Int64
	m1, rec1 := startMember(t, 1, peers, 0xacc, func(cfg *Config) {
		cfg.wrapListener = func(ln net.Listener) net.Listener { fl.Listener = ln; return fl }
		cfg.failingAfter = 100 * time.Millisecond
		cfg.OnAcceptError = func() { acceptErrors.Add(1) }
	})
	eventually(t, "ListenerErr to report the failing accepts", func() {}, func() bool { return m1.ListenerErr() != nil })
	if err := m1.ListenerErr(); !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), m1.listenAddr) {
		t.Fatalf("ListenerErr: %v; want the accept error, naming the address", err)
	}
	if n := acceptErrors.Load(); n < 2 {
		t.Fatalf("%d accept errors counted, want every one", n)
	}
	fl.failing.Store(false)
	// With nothing to accept, the record of failures goes stale.
	eventually(t, "ListenerErr to clear once accepts stop failing", func() {}, func() bool { return m1.ListenerErr() == nil })
	m2, _ := startMember(t, 2, peers, 0xacc)
	eventually(t, "member 2's heartbeats once accepts work", func() { m2.Send(heartbeatMsg(2, 1)) }, func() bool { return rec1.from(2) > 0 })
	// A failure then an accept that works: cleared at once.
	fl.failing.Store(true)
	eventually(t, "ListenerErr to report failing accepts again", func() {}, func() bool { return m1.ListenerErr() != nil })
	fl.failing.Store(false)
	eventually(t, "an accept that works to clear ListenerErr", func() {
		if c, err := net.Dial("tcp", m1.listenAddr); err == nil {
			c.Close()
		}
	}, func() bool { return m1.ListenerErr() == nil })
}

package peer

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/watchnet"
)

// stepClock is a clock a test moves by hand.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func newStepClock() *stepClock { return &stepClock{now: time.Unix(1_000_000, 0)} }

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *stepClock) step(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// withClock makes a transport measure the learned expiry on c; the sweep
// still ticks on real time, so tests also call forgetIdle themselves.
func withClock(c *stepClock) func(*Config) { return func(cfg *Config) { cfg.now = c.Now } }

func withLearnedExpiry(d time.Duration) func(*Config) {
	return func(cfg *Config) { cfg.LearnedExpiry = d }
}

// Streams the tests hold open must not end by the read timeout.
func withReadTimeout(d time.Duration) func(*Config) {
	return func(cfg *Config) { cfg.ReadTimeout = d }
}

// startMember3 starts member 3 of a three-member cluster whose members'
// addresses it returns, beside the transport and its removal recorder.
func startMember3(t *testing.T, clusterID uint64, opts ...func(*Config)) (map[uint64]string, *TCP, *removalRecorder) {
	t.Helper()
	a := freeport.ForIDs(t, 1, 2, 3)
	m3, rec3 := startMember(t, 3, map[uint64]string{1: a[1], 2: a[2], 3: a[3]}, clusterID, opts...)
	return a, m3, rec3
}

// dialCounter is an address a learned peer may announce: it counts the
// streams dialled to it and closes each at once (so the sender dials again
// every redial period for as long as it runs).
type dialCounter struct {
	addr  string
	dials atomic.Int64
}

func countDials(t *testing.T) *dialCounter {
	t.Helper()
	d := &dialCounter{}
	d.addr = watchnet.Accept(t, func(c net.Conn) {
		d.dials.Add(1)
		c.Close()
	})
	return d
}

// helloAs opens a stream to tr as member from of cluster, announcing
// peerAddr, and waits until tr took its heartbeat (so learned it).
func helloAs(t *testing.T, tr *TCP, rec *removalRecorder, from, cluster uint64, peerAddr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", tr.listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(rawHello(from, 3, cluster, peerAddr)); err != nil {
		t.Fatal(err)
	}
	eventually(t, fmt.Sprintf("member %d's heartbeat to arrive", from), func() {},
		func() bool { return rec.from(from) > 0 && tr.isPeer(from) })
	return c
}

// closeStream closes c, member from's stream to tr, and waits until tr
// saw it close.
func closeStream(t *testing.T, tr *TCP, c net.Conn, from uint64) {
	t.Helper()
	c.Close()
	eventually(t, fmt.Sprintf("member %d's stream to close", from), func() {}, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.inbound[from] == 0
	})
}

func sender(tr *TCP, id uint64) *peerSender { return (*tr.peers.Load())[id] }

func learnedCount(tr *TCP) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.learned)
}

// Rule guarded: a peer known only from its hello is forgotten once it has
// had no stream open to this member for the learned expiry: its sender
// stops, so the address it announced (anyone's, without TLS) is no longer
// dialled. One that keeps its stream open is kept and answered, however
// long that lasts. Real time and the transport's own sweep.
func TestLearnedPeerIsForgottenOnceItsStreamCloses(t *testing.T) {
	const cluster = 0xc1
	const expiry = 100 * time.Millisecond
	_, m3, rec3 := startMember3(t, cluster, withLearnedExpiry(expiry), withReadTimeout(time.Minute))
	gone, kept := countDials(t), countDials(t)

	c9 := helloAs(t, m3, rec3, 9, cluster, gone.addr)
	helloAs(t, m3, rec3, 10, cluster, kept.addr) // stays open
	eventually(t, "member 3 to dial both learned members", func() {},
		func() bool { return gone.dials.Load() > 0 && kept.dials.Load() > 0 })
	p9 := sender(m3, 9)

	closeStream(t, m3, c9, 9)
	eventually(t, "member 9 to be forgotten", func() {}, func() bool { return !m3.isPeer(9) })
	select {
	case <-p9.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the sender to forgotten member 9 still runs")
	}
	if m3.PeerClientAddr(9) != "" {
		t.Error("member 3 still redirects clients to forgotten member 9")
	}

	// While member 10's stream stays open, many expiries and sweeps pass
	// (each dial to it is at least a redial period apart); it stays, and
	// member 9's address hears at most the one dial that was in flight.
	after := gone.dials.Load()
	from := kept.dials.Load()
	need := int64(4*expiry/peerRedialPeriod) + 1
	eventually(t, "member 3 to keep dialling member 10", func() {},
		func() bool { return kept.dials.Load()-from >= need || !m3.isPeer(10) })
	if !m3.isPeer(10) {
		t.Fatal("member 10, whose stream is open, was forgotten")
	}
	if n := gone.dials.Load() - after; n > 1 {
		t.Errorf("forgotten member 9's address was dialled %d more times", n)
	}
}

// Rule guarded: slots taken by learned peers that went away free up: with
// all maxLearnedPeers slots held by members whose streams closed, a new
// member is refused until the expiry, and taken after it.
func TestLearnedSlotsFreedByExpiryAreTaken(t *testing.T) {
	const cluster = 0xc1
	clk := newStepClock()
	_, m3, rec3 := startMember3(t, cluster, withClock(clk), withLearnedExpiry(time.Minute))
	dc := countDials(t)

	for id := uint64(100); id < 100+maxLearnedPeers; id++ {
		// One at a time: the inbound limit (2 x peers + 8) is below 16.
		closeStream(t, m3, helloAs(t, m3, rec3, id, cluster, dc.addr), id)
	}
	const late = 100 + maxLearnedPeers
	c, err := net.Dial("tcp", m3.listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	if !send(t, c, rawHello(late, 3, cluster, dc.addr)) {
		t.Fatal("a 17th unknown member's stream stayed open")
	}
	if m3.isPeer(late) {
		t.Fatal("member 3 learned more than maxLearnedPeers members")
	}

	clk.step(time.Minute)
	helloAs(t, m3, rec3, late, cluster, dc.addr)
	if n := learnedCount(m3); n != 1 {
		t.Fatalf("%d learned members, want only the new one", n)
	}
	for id := uint64(100); id < late; id++ {
		if m3.isPeer(id) {
			t.Errorf("member %d, gone for the expiry, is still a peer", id)
		}
	}
}

// Rule guarded: only learned peers expire. A member the address book
// names, including one first learned from its hello, is never forgotten
// however long it stays silent; a learned one with its stream open is
// kept; one that went away and comes back is learned again.
func TestExpiryForgetsOnlyIdleLearnedPeers(t *testing.T) {
	const cluster = 0xc1
	clk := newStepClock()
	a, m3, rec3 := startMember3(t, cluster, withClock(clk), withLearnedExpiry(time.Minute), withReadTimeout(time.Hour))
	dc := countDials(t)

	closeStream(t, m3, helloAs(t, m3, rec3, 4, cluster, dc.addr), 4)
	closeStream(t, m3, helloAs(t, m3, rec3, 5, cluster, dc.addr), 5)
	c6 := helloAs(t, m3, rec3, 6, cluster, dc.addr)
	m3.SetPeers(map[uint64]string{1: a[1], 2: a[2], 3: a[3], 4: dc.addr}, nil) // the log names member 4

	clk.step(time.Hour)
	m3.forgetIdle()
	for _, id := range []uint64{1, 2, 4, 6} {
		if !m3.isPeer(id) {
			t.Errorf("member %d was forgotten", id)
		}
	}
	if m3.isPeer(5) {
		t.Error("member 5, learned and gone for the expiry, is still a peer")
	}

	closeStream(t, m3, c6, 6)
	clk.step(time.Minute - time.Nanosecond)
	m3.forgetIdle()
	if !m3.isPeer(6) {
		t.Fatal("member 6 was forgotten before the expiry")
	}
	clk.step(time.Nanosecond)
	m3.forgetIdle()
	if m3.isPeer(6) {
		t.Fatal("member 6 was kept past the expiry")
	}

	helloAs(t, m3, rec3, 5, cluster, dc.addr)
	if n := learnedCount(m3); n != 1 {
		t.Errorf("%d learned members, want member 5 alone", n)
	}
}

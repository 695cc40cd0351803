package chaos

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/watchnet"
)

// frameSink accepts connections and hands over each frame's
// payload with the time it arrived.
type frameSink struct {
	addr   string
	frames chan arrived
}

type arrived struct {
	payload []byte
	at      time.Time
}

func newFrameSink(t *testing.T) *frameSink {
	t.Helper()
	s := &frameSink{frames: make(chan arrived, 4096)}
	s.addr = watchnet.Accept(t, func(c net.Conn) { go s.read(c) })
	return s
}

// read hands over the frames c carries until it ends.
func (s *frameSink) read(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(r, b); err != nil {
			return
		}
		s.frames <- arrived{b, time.Now()}
	}
}

// next waits for the next frame, up to a generous bound.
func (s *frameSink) next(t *testing.T) arrived {
	t.Helper()
	select {
	case a := <-s.frames:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no frame arrived")
		return arrived{}
	}
}

func writeFrame(t *testing.T, c net.Conn, payload []byte) {
	t.Helper()
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	if _, err := c.Write(append(b, payload...)); err != nil {
		t.Fatal(err)
	}
}

func seqFrame(i uint64, sent time.Time) []byte {
	b := binary.BigEndian.AppendUint64(nil, i)
	return binary.BigEndian.AppendUint64(b, uint64(sent.UnixNano()))
}

func startProxy(t *testing.T, target string) (*Proxy, net.Conn) {
	t.Helper()
	p, err := NewProxy(target, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// Loss drops whole frames after the hello: every frame that arrives is
// intact and in order, about the set fraction is missing, and the hello
// always arrives.
func TestProxyLossDropsWholeFrames(t *testing.T) {
	sink := newFrameSink(t)
	p, c := startProxy(t, sink.addr)
	p.SetFault(LinkFault{Loss: 0.3})
	writeFrame(t, c, []byte("hello"))
	const n = 2000
	for i := range uint64(n) {
		writeFrame(t, c, seqFrame(i+1, time.Now()))
	}
	// Frames are read in order, so once the loss is off the end marker is
	// the last frame of the stream.
	waitFor(t, func() bool { return p.Counts().Forwarded+p.Counts().Dropped == n+1 })
	p.SetFault(LinkFault{})
	writeFrame(t, c, []byte("end"))

	if a := sink.next(t); string(a.payload) != "hello" {
		t.Fatalf("first frame %q, want the hello", a.payload)
	}
	var got, last uint64
	for {
		a := sink.next(t)
		if string(a.payload) == "end" {
			break
		}
		if len(a.payload) != 16 {
			t.Fatalf("frame of %d bytes: a frame was cut", len(a.payload))
		}
		seq := binary.BigEndian.Uint64(a.payload)
		if seq <= last || seq > n {
			t.Fatalf("frame %d after %d", seq, last)
		}
		last = seq
		got++
	}
	if lost := n - got; lost < n/5 || lost > n*2/5 {
		t.Fatalf("%d of %d frames lost at a loss of 0.3", lost, n)
	}
	if cs := p.Counts(); cs.Dropped != int64(n-got) || cs.Forwarded != int64(got)+2 {
		t.Fatalf("counts %+v, want %d dropped and %d forwarded", cs, n-got, got+2)
	}
}

// Delay with jitter holds every frame at least delay-jitter and keeps the
// stream's order.
func TestProxyDelayKeepsOrder(t *testing.T) {
	sink := newFrameSink(t)
	p, c := startProxy(t, sink.addr)
	const delay, jitter = 40 * time.Millisecond, 30 * time.Millisecond
	p.SetFault(LinkFault{Delay: delay, Jitter: jitter})
	const n = 200
	for i := range uint64(n) {
		writeFrame(t, c, seqFrame(i+1, time.Now()))
	}
	var slowest time.Duration
	for want := uint64(1); want <= n; want++ {
		a := sink.next(t)
		seq := binary.BigEndian.Uint64(a.payload)
		if seq != want {
			t.Fatalf("frame %d arrived where %d was due: order not kept", seq, want)
		}
		sent := time.Unix(0, int64(binary.BigEndian.Uint64(a.payload[8:])))
		took := a.at.Sub(sent)
		if took < delay-jitter {
			t.Fatalf("frame %d delivered after %v, below delay-jitter %v", seq, took, delay-jitter)
		}
		slowest = max(slowest, took)
	}
	if slowest < delay {
		t.Fatalf("no frame waited the full delay (slowest %v): jitter not drawn around it", slowest)
	}
}

// A cut link never reaches its target while the other direction, a link
// of its own, still carries frames: a one-way partition.
func TestProxyOneWayCut(t *testing.T) {
	a, b := newFrameSink(t), newFrameSink(t)
	ab, cab := startProxy(t, b.addr) // a dials b
	ba, cba := startProxy(t, a.addr) // b dials a
	_ = ba
	ab.SetBlocked(true)
	// The connection opened before the cut was dropped by it; dial again.
	cab.Close()
	c2, err := net.Dial("tcp", ab.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	writeFrame(t, c2, []byte("hello from a"))
	writeFrame(t, cba, []byte("hello from b"))
	if got := a.next(t); string(got.payload) != "hello from b" {
		t.Fatalf("b->a carried %q", got.payload)
	}
	waitFor(t, func() bool { return ab.Counts().Blackholed == int64(4+len("hello from a")) })
	select {
	case got := <-b.frames:
		t.Fatalf("a->b is cut but carried %q", got.payload)
	default:
	}
	// Healing drops the blackholed stream: the sender sees it end and
	// re-dials, and the link carries again.
	ab.SetBlocked(false)
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("healing left the blackholed stream open: %v", err)
	}
	c3, err := net.Dial("tcp", ab.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	writeFrame(t, c3, []byte("again"))
	if got := b.next(t); string(got.payload) != "again" {
		t.Fatalf("healed a->b carried %q", got.payload)
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// bound.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// CutLinks cuts exactly the listed directions; link faults go to the
// listed links only, and HealNet clears them.
func TestSupervisorLinkFaults(t *testing.T) {
	s := &Supervisor{spec: ClusterSpec{Nodes: 3}, proxies: map[[2]int]*Proxy{}}
	for _, l := range s.Links() {
		p, err := NewProxy("127.0.0.1:1", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		s.proxies[l] = p
	}
	s.CutLinks([][2]int{{1, 2}, {3, 2}})
	for l, p := range s.proxies {
		if want := l == [2]int{1, 2} || l == [2]int{3, 2}; p.Blocked() != want {
			t.Errorf("link %v blocked=%v, want %v", l, p.Blocked(), want)
		}
	}
	f := LinkFault{Delay: time.Millisecond, Loss: 0.5}
	s.SetLinkFault([][2]int{{2, 1}}, f)
	for l, p := range s.proxies {
		if want := l == [2]int{2, 1}; (p.Fault() == f) != want {
			t.Errorf("link %v fault %+v", l, p.Fault())
		}
	}
	s.Heal()
	s.HealNet()
	for l, p := range s.proxies {
		if p.Blocked() || p.Fault() != (LinkFault{}) {
			t.Errorf("link %v not healed", l)
		}
	}
}

// An armed hold lets messages through until a snapshot stream starts on
// the link; from then on the snapshot stream passes whole and every
// message of the link's other streams is dropped, the hello of a new
// stream excepted, until the hold is disarmed.
func TestProxyHoldsMessagesAfterASnapshotStreamStarts(t *testing.T) {
	sink := newFrameSink(t)
	p, msgs := startProxy(t, sink.addr)
	p.HoldAfterSnapshot(true)
	writeFrame(t, msgs, []byte("hello"))
	writeFrame(t, msgs, []byte("before"))
	for _, want := range []string{"hello", "before"} {
		if a := sink.next(t); string(a.payload) != want {
			t.Fatalf("got %q, want %q: nothing is held before a snapshot stream", a.payload, want)
		}
	}
	snap, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for _, f := range []string{"hello-snap", snapshotStreamMarker, snapshotHeaderMagic + "\x05", "chunk"} {
		writeFrame(t, snap, []byte(f))
	}
	for _, want := range []string{"hello-snap", snapshotStreamMarker, snapshotHeaderMagic + "\x05", "chunk"} {
		if a := sink.next(t); string(a.payload) != want {
			t.Fatalf("snapshot stream: got %q, want %q", a.payload, want)
		}
	}
	writeFrame(t, msgs, []byte("held"))
	waitFor(t, func() bool { return p.Counts().Dropped == 1 })
	p.HoldAfterSnapshot(false)
	writeFrame(t, msgs, []byte("after"))
	if a := sink.next(t); string(a.payload) != "after" {
		t.Fatalf("got %q, want %q: the held message must be gone and the hold off", a.payload, "after")
	}
}

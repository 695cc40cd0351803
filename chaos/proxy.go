package chaos

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// maxProxyFrame bounds a frame the proxy will buffer. The members' limit is
// 64 MiB (a snapshot travels as one message); anything larger is not the
// peer protocol and closes the stream.
const maxProxyFrame = 128 << 20

// LinkFault slows or thins the messages of one directed link.
type LinkFault struct {
	Delay  time.Duration // added to every message
	Jitter time.Duration // each message's delay varies by up to ±Jitter; order is kept
	Loss   float64       // fraction of messages dropped, 0..1
}

// ProxyCounts are a link's running totals.
type ProxyCounts struct {
	Forwarded  int64 // frames delivered
	Dropped    int64 // frames dropped by Loss
	Blackholed int64 // bytes swallowed while the link was cut
}

// Proxy carries one directed peer link (node i dialling node j: the stream
// carries only i's messages to j) so the harness can cut, slow or thin it
// without root. It reads the peer protocol's length-prefixed frames, so a
// loss drops whole messages (never bytes: that would be stream corruption,
// which the member rightly treats as a broken connection) and a delay
// keeps the stream's order. The first frame of a stream, the hello, is
// never dropped.
type Proxy struct {
	ln     net.Listener
	target string

	streams // its mu guards what follows too
	blocked bool
	fault   LinkFault
	rng     *rand.Rand // loss and jitter draws, seeded: guarded by mu

	cut *snapshotCut // armed by CutSnapshot; guarded by mu
	raw bool         // a byte-stream link (NewByteProxy): no frames read
	// holdArmed (HoldAfterSnapshot): once a snapshot stream starts on the
	// link, holding drops every message of its other streams, the
	// snapshot streams still pass; guarded by mu.
	holdArmed, holding bool

	forwarded, dropped, blackholed atomic.Int64
}

// The snapshot stream as node/peer/snapshot.go writes it: after the hello,
// a frame holding the marker, then a header frame (magic, the data's size
// as a uvarint, ...), then chunk frames (a uvarint sequence number, then
// data).
const (
	snapshotStreamMarker = "\x00RLSNAP1"
	snapshotHeaderMagic  = "RLSH"
)

// SnapshotCut is what became of a cut armed by CutSnapshot.
type SnapshotCut struct {
	From, To  int   // the link
	Size      int64 // the snapshot's data size, from its stream's header
	Forwarded int64 // data bytes handed on before the cut
	// Cut is false when the stream ended before the cut's point: a
	// snapshot of one chunk, or a stream that broke by itself.
	Cut bool
}

// snapshotCut is an armed cut: the next snapshot stream on the link is
// cut once frac of its data went through, and the outcome sent on done.
type snapshotCut struct {
	from, to int
	frac     float64
	done     chan<- SnapshotCut
}

// CutSnapshot arms the link (from, to): the next snapshot stream it
// carries stops being read once frac (0..1) of the snapshot's data was
// forwarded, at least one chunk; what was forwarded is delivered, then
// both connections close, as when the sender dies or the network resets
// mid-transfer. The outcome goes to done (buffered: never waited on). A
// nil done disarms the link.
func (p *Proxy) CutSnapshot(from, to int, frac float64, done chan<- SnapshotCut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if done == nil {
		p.cut = nil
		return
	}
	p.cut = &snapshotCut{from: from, to: to, frac: frac, done: done}
}

// HoldAfterSnapshot arms the link (on) to drop every message it carries
// outside snapshot streams from the moment the next snapshot stream
// starts: the receiver gets the snapshot, and nothing the sender sends
// after it (the appends and heartbeats that follow an install), while
// its own answers travel the reverse link. Off disarms it and carries
// messages again.
func (p *Proxy) HoldAfterSnapshot(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdArmed, p.holding = on, false
}

// startHold starts holding if the link is armed to: a snapshot stream
// started.
func (p *Proxy) startHold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = p.holdArmed
}

// held says whether the link drops messages outside snapshot streams.
func (p *Proxy) held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding
}

// takeCut disarms the link and returns its cut, if armed.
func (p *Proxy) takeCut() *snapshotCut {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cut
	p.cut = nil
	return c
}

// cutting follows one snapshot stream under an armed cut.
type cutting struct {
	*snapshotCut
	size, at, forwarded int64
	reported            bool
}

// report sends the outcome, once.
func (c *cutting) report(cut bool) {
	if c == nil || c.reported {
		return
	}
	c.reported = true
	select {
	case c.done <- SnapshotCut{From: c.from, To: c.to, Size: c.size, Forwarded: c.forwarded, Cut: cut}:
	default:
	}
}

// snapshotSize reads the data size from a snapshot stream's header frame.
func snapshotSize(payload []byte) (int64, bool) {
	if !bytes.HasPrefix(payload, []byte(snapshotHeaderMagic)) {
		return 0, false
	}
	n, k := binary.Uvarint(payload[len(snapshotHeaderMagic):])
	if k <= 0 || n > 1<<62 {
		return 0, false
	}
	return int64(n), true
}

// chunkData is how many data bytes a chunk frame carries.
func chunkData(payload []byte) int64 {
	_, k := binary.Uvarint(payload)
	if k <= 0 {
		return 0
	}
	return int64(len(payload) - k)
}

// NewProxy listens on a free loopback port and forwards to target; seed
// drives its loss and jitter draws.
func NewProxy(target string, seed uint64) (*Proxy, error) {
	return newLink(target, seed).listen()
}

// listen serves p on a free loopback port.
func (p *Proxy) listen() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy for %s: %w", p.target, err)
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln, func(in net.Conn) { p.serve(in, in) })
	return p, nil
}

// Addr is where the dialling node should connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetBlocked blackholes the link (bytes vanish, connections stay open) or
// restores it. Either change drops the link's current connections, so the
// sender re-dials and sees the new state at once.
func (p *Proxy) SetBlocked(b bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked == b {
		return
	}
	p.blocked = b
	p.dropLocked()
}

// Blocked reports whether the link is cut.
func (p *Proxy) Blocked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocked
}

// SetFault applies f to every message read from now on, on live streams
// too; the zero LinkFault restores the link.
func (p *Proxy) SetFault(f LinkFault) {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
}

// Fault returns the link's current fault.
func (p *Proxy) Fault() LinkFault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Counts returns the link's totals so far.
func (p *Proxy) Counts() ProxyCounts {
	return ProxyCounts{Forwarded: p.forwarded.Load(), Dropped: p.dropped.Load(), Blackholed: p.blackholed.Load()}
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() { p.close(p.ln) }

// streams are the streams a Proxy or a Gateway carries, to drop on
// Close; once closing, it takes none.
type streams struct {
	mu     sync.Mutex // guards conns and closed (and its owner's state)
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and each stream's goroutine
}

func (t *streams) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.conns == nil {
		t.conns = map[net.Conn]struct{}{}
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *streams) untrack(cs ...net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		delete(t.conns, c)
		c.Close()
	}
}

func (t *streams) dropLocked() {
	for c := range t.conns {
		c.Close()
	}
}

// close closes ln (when there is one) and every stream, and waits for
// their goroutines.
func (t *streams) close(ln net.Listener) {
	t.mu.Lock()
	t.closed = true
	if ln != nil {
		ln.Close()
	}
	t.dropLocked()
	t.mu.Unlock()
	t.wg.Wait()
}

// accept accepts on ln until it is closed, and serves each stream it
// tracks on a goroutine of its own; one that comes once closing began is
// closed and ends the loop. The caller counted this loop in wg.
func (t *streams) accept(ln net.Listener, serve func(net.Conn)) {
	defer t.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !t.track(c) {
			c.Close()
			return
		}
		t.wg.Add(1)
		go serve(c)
	}
}

// newLink returns a Proxy without a listener of its own: a Gateway hands
// it the streams of its directed link.
func newLink(target string, seed uint64) *Proxy {
	return &Proxy{target: target, rng: rand.New(rand.NewPCG(seed, 0x70726f78))}
}

// handle carries the stream in, whose bytes (the hello first, unread) are
// read from r, on this link.
func (p *Proxy) handle(in net.Conn, r io.Reader) {
	if !p.track(in) {
		in.Close()
		return
	}
	p.wg.Add(1)
	go p.serve(in, r)
}

// countingDiscard counts what a cut link swallows.
type countingDiscard struct{ n *atomic.Int64 }

func (d countingDiscard) Write(b []byte) (int, error) {
	d.n.Add(int64(len(b)))
	return len(b), nil
}

func (p *Proxy) serve(in net.Conn, r io.Reader) {
	defer p.wg.Done()
	if p.Blocked() {
		io.Copy(countingDiscard{&p.blackholed}, r) // until the link changes
		p.untrack(in)
		return
	}
	out, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		p.untrack(in)
		return
	}
	if !p.track(out) {
		out.Close()
		p.untrack(in)
		return
	}
	if p.raw {
		p.copyBytes(in, r, out)
		return
	}
	quit := make(chan struct{})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(quit)
			p.untrack(in, out)
		})
	}
	q := make(chan timedFrame, 256)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer close(q) // the writer delivers what is queued, then stops
		p.readFrames(r, q, quit)
	}()
	go func() {
		defer wg.Done()
		defer stop()
		p.writeFrames(out, q, quit)
	}()
	go func() {
		// The receiver never writes on a peer stream; copy it anyway so the
		// proxy stays a faithful TCP link.
		defer wg.Done()
		defer stop()
		io.Copy(in, out)
	}()
	wg.Wait()
}

// timedFrame is one message with the time it may be delivered.
type timedFrame struct {
	b   []byte // length prefix and payload
	due time.Time
}

// readFrames reads src's frames, drops the lost ones and stamps the rest
// with their delivery time, never earlier than the frame before it. On a
// snapshot stream it takes the link's armed cut, if any, and stops
// reading at the cut's point: the writer delivers what is queued, then
// the stream closes.
func (p *Proxy) readFrames(src io.Reader, q chan<- timedFrame, quit <-chan struct{}) {
	r := bufio.NewReaderSize(src, 64<<10)
	var last time.Time
	var snapshot bool
	var cut *cutting
	defer func() { cut.report(false) }()
	for k := 0; ; k++ {
		first := k == 0
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxProxyFrame {
			return
		}
		b := make([]byte, 4+int(n))
		copy(b, hdr[:])
		if _, err := io.ReadFull(r, b[4:]); err != nil {
			return
		}
		switch payload := b[4:]; {
		case k == 1:
			snapshot = string(payload) == snapshotStreamMarker
			if snapshot {
				p.startHold()
			}
		case k == 2 && snapshot:
			if size, ok := snapshotSize(payload); ok {
				if c := p.takeCut(); c != nil {
					cut = &cutting{snapshotCut: c, size: size, at: max(1, int64(c.frac*float64(size)))}
				}
			}
		case k > 2 && cut != nil:
			if cut.forwarded >= cut.at {
				cut.report(true)
				return
			}
		}
		delay, drop := p.draw(!first)
		if drop || (!first && !snapshot && p.held()) {
			p.dropped.Add(1)
			continue
		}
		if k > 2 && cut != nil {
			cut.forwarded += chunkData(b[4:])
		}
		due := time.Now().Add(delay)
		if due.Before(last) {
			due = last
		}
		last = due
		select {
		case q <- timedFrame{b, due}:
		case <-quit:
			return
		}
	}
}

// draw decides one frame's fate under the link's current fault.
func (p *Proxy) draw(mayDrop bool) (delay time.Duration, drop bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.fault
	if mayDrop && f.Loss > 0 && p.rng.Float64() < f.Loss {
		return 0, true
	}
	delay = f.Delay
	if f.Jitter > 0 {
		delay += time.Duration(p.rng.Int64N(2*int64(f.Jitter)+1)) - f.Jitter
	}
	return max(delay, 0), false
}

// writeFrames delivers frames in order, each at its due time, flushing
// whenever nothing more is ready.
func (p *Proxy) writeFrames(dst net.Conn, q <-chan timedFrame, quit <-chan struct{}) {
	w := bufio.NewWriterSize(dst, 64<<10)
	var timer *time.Timer
	for f := range q {
		if wait := time.Until(f.due); wait > 0 {
			if w.Flush() != nil {
				return
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-quit:
				return
			}
		}
		if _, err := w.Write(f.b); err != nil {
			return
		}
		p.forwarded.Add(1)
		if len(q) == 0 && w.Flush() != nil {
			return
		}
	}
	w.Flush()
}

// Gateway is the peer address every member dials member `to` at: it reads
// the hello that opens each stream, which names the sender, and carries
// the stream on that directed link's Proxy (from, to). One address per
// member lets every member hold the same address book (the replicated
// book of a membership change, the one a snapshot carries) while each
// directed link stays separately faultable.
type Gateway struct {
	ln   net.Listener
	to   int
	link func(from int) *Proxy // nil: not a link the harness knows; closed

	streams // those whose hello is being read
}

// maxHello bounds the first frame a Gateway reads: a hello is a few dozen
// bytes.
const maxHello = 4 << 10

// NewGateway listens on a free loopback port for member to's peer streams.
func NewGateway(to int, link func(from int) *Proxy) (*Gateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gateway for member %d: %w", to, err)
	}
	g := &Gateway{ln: ln, to: to, link: link}
	g.wg.Add(1)
	go g.accept(ln, g.route)
	return g, nil
}

// Addr is member to's peer address as the others dial it.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// Close stops accepting and drops the streams not yet handed to a link
// (the links' own Close drops theirs).
func (g *Gateway) Close() { g.close(g.ln) }

// route reads c's hello without consuming it and hands c to its link.
func (g *Gateway) route(c net.Conn) {
	defer g.wg.Done()
	r := bufio.NewReaderSize(c, 64<<10)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	from, err := peekHelloSender(r)
	c.SetReadDeadline(time.Time{})
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
	var p *Proxy
	if err == nil {
		p = g.link(from)
	}
	if p == nil {
		c.Close()
		return
	}
	p.handle(c, r)
}

// peekHelloSender reads the sender id of the peer hello that opens r's
// stream (a length-prefixed frame: "RLP1", then the sender id as a
// uvarint; node/peer's EncodeHello), leaving it unread.
func peekHelloSender(r *bufio.Reader) (int, error) {
	hdr, err := r.Peek(4)
	if err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(hdr)
	if n < 5 || n > maxHello {
		return 0, fmt.Errorf("first frame of %d bytes is no peer hello", n)
	}
	b, err := r.Peek(4 + int(n))
	if err != nil {
		return 0, err
	}
	b = b[4:]
	if string(b[:4]) != "RLP1" {
		return 0, errors.New("not a raftlock peer hello")
	}
	from, k := binary.Uvarint(b[4:])
	if k <= 0 || from == 0 || from > 1<<20 {
		return 0, errors.New("bad sender in peer hello")
	}
	return int(from), nil
}

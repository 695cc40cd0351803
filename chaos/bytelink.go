package chaos

import (
	"bufio"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Byte-stream links carry the peer traffic of lock services other than
// raftlock (etcd's peer HTTP, Redis's replication and Sentinel links),
// whose messages the harness does not frame: a byte-stream Proxy copies
// bytes both ways and can only be cut (blackholed), never slowed or
// thinned per message, since dropping bytes would corrupt the stream.

// NewByteProxy is NewProxy in byte-stream mode: the link is cut by
// SetBlocked; SetFault has no effect.
func NewByteProxy(target string, seed uint64) (*Proxy, error) {
	return newByteLink(target, seed).listen()
}

// newByteLink is newLink in byte-stream mode, for an HTTPGateway.
func newByteLink(target string, seed uint64) *Proxy {
	p := newLink(target, seed)
	p.raw = true
	return p
}

// copyBytes carries in (read from r) to out and back until either side
// closes or the link changes (SetBlocked drops both).
func (p *Proxy) copyBytes(in net.Conn, r io.Reader, out net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		n, _ := io.Copy(out, r)
		p.forwarded.Add(n)
		p.untrack(in, out)
	}()
	go func() {
		defer wg.Done()
		io.Copy(in, out)
		p.untrack(in, out)
	}()
	wg.Wait()
}

// HTTPGateway is a member's advertised peer address when the peers speak
// HTTP/1.1 and name themselves in a request header (etcd's rafthttp sends
// X-Server-From: the sender's member id in hex on every stream and
// pipeline request): it reads the first request's headers of each
// connection, routes it to the directed link's byte-stream Proxy by the
// sender (the header, or for a request without it the process holding
// the connection's other end), and carries a connection whose sender it
// does not know (any stream before the harness learnt the ids) straight
// to the member, uncut.
type HTTPGateway struct {
	ln     net.Listener
	target string
	header string
	link   func(c net.Conn, sender string) *Proxy // nil: not a sender the harness knows

	streams
}

// NewHTTPGateway listens on a free loopback port for target's peer
// connections, routing each by the value of its first request's header.
func NewHTTPGateway(target, header string, link func(c net.Conn, sender string) *Proxy) (*HTTPGateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &HTTPGateway{ln: ln, target: target, header: header, link: link}
	g.wg.Add(1)
	go g.accept(ln, g.route)
	return g, nil
}

// Addr is the address the other members dial.
func (g *HTTPGateway) Addr() string { return g.ln.Addr().String() }

// Close stops accepting and drops the connections it carries itself.
func (g *HTTPGateway) Close() { g.close(g.ln) }

// Drop closes the connections the gateway carries straight through, so
// their senders re-dial and are routed now that their ids are known.
func (g *HTTPGateway) Drop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropLocked()
}

func (g *HTTPGateway) route(c net.Conn) {
	defer g.wg.Done()
	r := bufio.NewReaderSize(c, 64<<10)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	sender := peekHeader(r, g.header)
	c.SetReadDeadline(time.Time{})
	if p := g.link(c, sender); p != nil {
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
		p.handle(c, r)
		return
	}
	out, err := net.DialTimeout("tcp", g.target, time.Second)
	if err != nil || !g.track(out) {
		if out != nil {
			out.Close()
		}
		g.untrack(c)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(out, r); g.untrack(c, out) }()
	go func() { defer wg.Done(); io.Copy(c, out); g.untrack(c, out) }()
	wg.Wait()
}

// peekHeader returns the value of the header named name in the HTTP/1.x
// request that opens r, leaving it unread; "" when there is none or the
// stream is no HTTP/1.x request. It waits for bytes only until the
// request's headers end: the sender then waits for an answer.
func peekHeader(r *bufio.Reader, name string) string {
	for {
		b, _ := r.Peek(r.Buffered()) // what has come, without waiting
		end := strings.Index(string(b), "\r\n\r\n")
		if end < 0 {
			if len(b) >= 16<<10 {
				return ""
			}
			if _, err := r.Peek(len(b) + 1); err != nil { // wait for more
				return ""
			}
			continue
		}
		_, rest, ok := strings.Cut(string(b[:end]), "\r\n")
		if !ok {
			return ""
		}
		h, _ := textproto.NewReader(bufio.NewReader(strings.NewReader(rest + "\r\n\r\n"))).ReadMIMEHeader()
		return h.Get(name)
	}
}

// hexID is an etcd member id as rafthttp writes it in X-Server-From.
func hexID(id uint64) string { return strconv.FormatUint(id, 16) }

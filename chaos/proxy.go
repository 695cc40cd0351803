package chaos

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy carries one directed peer link (node i dialling node j) so the
// harness can cut or slow it without root: pass, blackhole, or delay.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked bool
	delay   time.Duration
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
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

// SetDelay delays every chunk forwarded on the link.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *Proxy) dropLocked() {
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	p.dropLocked()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			in.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	blocked := p.blocked
	p.mu.Unlock()
	if blocked {
		io.Copy(io.Discard, in) // blackhole until the link changes
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
	done := make(chan struct{}, 2)
	forward := func(dst, src net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				d := p.delay
				p.mu.Unlock()
				if d > 0 {
					time.Sleep(d)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go forward(out, in)
	go forward(in, out)
	<-done
	p.untrack(in, out)
	<-done
}

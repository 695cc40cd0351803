package client

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/raftlock/raftlock/client/wire"
)

// conn is one pipelined connection to a member: any number of requests in
// flight, answers matched by id.
type conn struct {
	addr string
	nc   net.Conn
	log  *slog.Logger
	w    *wire.Writer

	mu      sync.Mutex
	pending map[uint64]chan wire.Response
	err     error
	done    chan struct{}
	// goingAway: the member sent a goaway; no new requests go out here, and
	// the connection closes once the pending ones are answered.
	goingAway bool
}

func newConn(addr string, nc net.Conn, log *slog.Logger) *conn {
	cn := &conn{addr: addr, nc: nc, log: log,
		pending: make(map[uint64]chan wire.Response), done: make(chan struct{})}
	cn.w = wire.NewWriter(nc, func(err error) { cn.close(fmt.Errorf("write: %w", err)) })
	go cn.readLoop()
	return cn
}

// broken says whether new requests must go elsewhere.
func (cn *conn) broken() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err != nil || cn.goingAway
}

// goAway handles the member's goaway.
func (cn *conn) goAway() {
	cn.mu.Lock()
	cn.goingAway = true
	idle := len(cn.pending) == 0
	cn.mu.Unlock()
	if idle {
		cn.close(errMemberStopping)
	}
}

var errMemberStopping = fmt.Errorf("%w: member stopping", ErrUnavailable)

func (cn *conn) close(err error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.err != nil {
		return
	}
	cn.err = err
	close(cn.done)
	cn.nc.Close()
	if cn.w != nil {
		cn.w.Close()
	}
}

// roundTrip sends req and waits for its answer. sent reports whether the
// request may have reached the member (and so may have taken effect).
func (cn *conn) roundTrip(ctx context.Context, req *wire.Request) (resp wire.Response, sent bool, err error) {
	ch := make(chan wire.Response, 1)
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return wire.Response{}, false, cn.err
	}
	if cn.goingAway {
		cn.mu.Unlock()
		return wire.Response{}, false, errMemberStopping
	}
	cn.pending[req.ID] = ch
	cn.mu.Unlock()
	defer func() {
		cn.mu.Lock()
		delete(cn.pending, req.ID)
		last := cn.goingAway && len(cn.pending) == 0
		cn.mu.Unlock()
		if last {
			cn.close(errMemberStopping)
		}
	}()
	if queued, err := cn.w.Write(func(b []byte) []byte { return wire.AppendRequest(b, req) }); err != nil {
		return wire.Response{}, queued, fmt.Errorf("connection to %s lost: %w", cn.addr, err)
	}
	select {
	case resp = <-ch:
		return resp, true, nil
	case <-cn.done:
		return wire.Response{}, true, fmt.Errorf("connection to %s lost: %w", cn.addr, cn.err)
	case <-ctx.Done():
		// Tell the member we left, so a queued acquire leaves the queue and
		// a grant that still applies is released at once.
		cancel := &wire.Request{ID: req.ID, Op: wire.OpCancel}
		cn.w.Write(func(b []byte) []byte { return wire.AppendRequest(b, cancel) })
		return wire.Response{}, true, ctx.Err()
	}
}

func (cn *conn) readLoop() {
	r := bufio.NewReaderSize(cn.nc, 32<<10)
	for {
		body, err := wire.ReadFrame(r)
		if err != nil {
			cn.close(fmt.Errorf("read: %w", err))
			return
		}
		resp, err := wire.DecodeResponse(body)
		if err != nil {
			cn.log.Warn("closing connection after a malformed answer", "addr", cn.addr, "err", err)
			cn.close(err)
			return
		}
		if resp.ID == wire.GoAwayID && resp.Op == wire.OpUnavailable {
			cn.goAway()
			continue
		}
		cn.mu.Lock()
		ch, ok := cn.pending[resp.ID]
		cn.mu.Unlock()
		if ok {
			// A call's channel has room for its one answer; a watch's
			// blocks while its reader lags, which holds the member's
			// stream back until the member cuts the watch off.
			select {
			case ch <- resp:
			case <-cn.done:
				return
			}
		}
	}
}

// stream sends req, whose answers (any number) go to ch until the caller
// ends it (end) or the connection closes.
func (cn *conn) stream(req *wire.Request, ch chan wire.Response) error {
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return cn.err
	}
	cn.pending[req.ID] = ch
	cn.mu.Unlock()
	if _, err := cn.w.Write(func(b []byte) []byte { return wire.AppendRequest(b, req) }); err != nil {
		return fmt.Errorf("connection to %s lost: %w", cn.addr, err)
	}
	return nil
}

// failure is why the connection closed (nil while it is open).
func (cn *conn) failure() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err
}

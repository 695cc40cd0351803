package peer

// The outbound side: one sender goroutine and bounded queue per peer,
// which dials, writes batches of raft messages and dials again when its
// stream breaks.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// newSender is the sender of the stream to peer id at addr; run starts it.
func (t *TCP) newSender(id uint64, addr string) *peerSender {
	ctx, cancel := context.WithCancel(t.ctx)
	return &peerSender{t: t, id: id, addr: addr, queue: make(chan *raftpb.Message, peerQueueLen), ctx: ctx, cancel: cancel,
		stopped: make(chan struct{})}
}

// peerSender owns the outbound stream to one peer.
type peerSender struct {
	t     *TCP
	id    uint64
	addr  string
	queue chan *raftpb.Message
	// ctx ends when the transport closes or the peer leaves the
	// configuration.
	ctx    context.Context
	cancel context.CancelFunc

	wmu  sync.Mutex // guards conn and dead
	conn net.Conn   // the live stream, nil when there is none
	dead chan struct{}

	stopped chan struct{} // closed when run returns: no more dials

	snapping atomic.Bool // a snapshot stream to this peer is under way (startSnapshot)
}

// breakLocked ends the live stream; the stream goroutine re-dials.
func (p *peerSender) breakLocked() {
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
		close(p.dead)
	}
}

func (p *peerSender) run() {
	defer p.t.wg.Done()
	defer close(p.stopped)
	ctx := p.ctx
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, peerDialTimeout)
		c, err := p.t.dial(dctx, p.id, p.addr)
		cancel()
		if err == nil && p.t.track(c, true) {
			err = p.stream(c)
			p.t.track(c, false)
			c.Close()
			if ctx.Err() == nil {
				p.t.log.Debug("peer stream ended", "peer", p.id, "err", err)
			}
		}
		p.t.handler.ReportUnreachable(p.id)
		p.dropQueued()
		select {
		case <-ctx.Done():
		case <-time.After(peerRedialPeriod):
		}
	}
}

// dropQueued discards what piled up while the peer was unreachable: raft
// will send it again, and stale appends only waste the next stream.
func (p *peerSender) dropQueued() {
	for {
		select {
		case m := <-p.queue:
			if m.GetType() == raftpb.MessageType_MsgSnap {
				p.t.handler.ReportSnapshot(p.id, true)
			}
		default:
			return
		}
	}
}

// stream writes queued messages, coalescing whatever is queued into one
// write, until an error or shutdown.
func (p *peerSender) stream(c net.Conn) error {
	hello := AppendFrame(nil, append(EncodeHello(p.t.id, p.id, p.t.clientAddr), p.t.helloExtension(p.id)...))
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(hello); err != nil {
		return err
	}
	dead := make(chan struct{})
	p.wmu.Lock()
	p.conn, p.dead = c, dead
	p.wmu.Unlock()
	// The reader below ends once the stream is closed; waiting for it
	// keeps it inside the sender's run, so inside t.wg: nothing reads (or
	// reports a removal) after Close returns.
	readerDone := make(chan struct{})
	defer func() {
		p.wmu.Lock()
		if p.conn == c {
			p.breakLocked()
		}
		p.wmu.Unlock()
		<-readerDone // p.conn != c only once breakLocked closed c
	}()
	go p.watch(c, readerDone)
	var buf []byte
	for {
		var m *raftpb.Message
		select {
		case <-p.ctx.Done():
			return p.ctx.Err()
		case <-dead:
			return errors.New("stream closed")
		case m = <-p.queue:
		}
		var err error
		if buf, err = p.batch(buf[:0], m); err != nil {
			return err
		}
		if len(buf) == 0 {
			continue
		}
		if err := p.write(c, buf); err != nil {
			return err
		}
	}
}

// watch reads stream c, which detects the peer closing it, the notice of
// a peer that knows this member was removed and the peer's API address
// (readBack); it closes done when c ends.
func (p *peerSender) watch(c net.Conn, done chan struct{}) {
	defer close(done)
	p.readBack(c)
	p.wmu.Lock()
	if p.conn == c {
		p.breakLocked()
	}
	p.wmu.Unlock()
}

// batch appends to buf the frames of m and of the messages queued behind
// it, up to about 1 MiB; a snapshot goes on a stream of its own instead.
func (p *peerSender) batch(buf []byte, m *raftpb.Message) ([]byte, error) {
	for m != nil {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			// Never in a frame of this stream: it may be larger than
			// any frame, and would hold up the heartbeats behind it.
			p.startSnapshot(m)
		} else {
			data, err := proto.Marshal(m)
			if err != nil {
				return buf, fmt.Errorf("encode raft message: %w", err)
			}
			buf = AppendFrame(buf, data)
		}
		m = nil
		if len(buf) < 1<<20 {
			select {
			case m = <-p.queue:
			default:
			}
		}
	}
	return buf, nil
}

// write writes buf on stream c, unless c was broken meanwhile; a failed
// write breaks it.
func (p *peerSender) write(c net.Conn, buf []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.conn != c {
		return errors.New("stream closed")
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Write(buf)
	if err != nil {
		p.breakLocked()
	}
	return err
}

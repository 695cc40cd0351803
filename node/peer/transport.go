// Package peer is the TCP transport between members: a hello naming the
// sender, then length-prefixed raft messages, one sender goroutine and
// queue per peer; snapshots stream in chunks on a connection of their own
// (snapshot.go).
package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"google.golang.org/protobuf/proto"
)

// Transport carries raft messages between members. The node never blocks on
// it: Send queues or drops.
type Transport interface {
	// Start begins accepting peer connections and delivering to h.
	Start(h Handler) error
	// Send queues messages; a full queue drops them and reports the peer
	// unreachable (raft retransmits).
	Send(msgs []*raftpb.Message)
	// PeerClientAddr returns the client API address a peer announced, if any.
	PeerClientAddr(id uint64) string
	// PeerAPIAddr returns the HTTP/JSON API address a peer announced
	// (announce.go), or this member's own; "" when unknown.
	PeerAPIAddr(id uint64) string
	Close() error
}

// Handler is the node side of a Transport.
type Handler interface {
	Receive(m *raftpb.Message)
	ReportUnreachable(id uint64)
	ReportSnapshot(id uint64, failed bool)
}

// RemovedHandler is a Handler told when a peer says this member was
// removed from the cluster (it refused this member's stream because the
// removal applied there). The removal is committed, so the member may stop
// even if it never applies it itself (the leader stops sending to a member
// once it applied its removal, so it may never hear of it otherwise).
type RemovedHandler interface {
	ReportRemoved(by uint64)
}

// removedNotice is what a member writes on the stream of a member it
// knows was removed, before it closes it.
const removedNotice = "RLP1 removed from the cluster\n"

const (
	peerMagic        = "RLP1"
	peerQueueLen     = 4096
	peerDialTimeout  = time.Second
	peerRedialPeriod = 50 * time.Millisecond
)

// maxLearnedPeers bounds the peers known only from their hellos (see
// learn): members added while this one was down, a handful at most.
const maxLearnedPeers = 16

// DefaultLearnedExpiry is how long a learned peer (see learn) stays
// a peer with no inbound stream from it open, when Config.LearnedExpiry is
// zero. A member that has this one in its address book keeps a stream
// to it open, and when the stream ends (a read timeout, a reset) its
// sender dials again within peerDialTimeout+peerRedialPeriod; four such
// attempts missed in a row mean it is down, cut off or not a member at
// all (a stranger that knew the cluster id, which is no secret without
// TLS). Forgetting a real member costs little: its next hello learns it
// again. Forgetting a stranger frees its slot (maxLearnedPeers), so the
// answers to a member that missed a configuration change cannot be
// switched off by filling them, and stops the dialling of the address it
// announced. A peer that dies without closing its stream is forgotten
// after the read timeout (Config.ReadTimeout) ends that stream, plus this.
const DefaultLearnedExpiry = 4 * (peerDialTimeout + peerRedialPeriod)

// learnedPeer is a peer known only from its hello.
type learnedPeer struct {
	addr string // the peer address its hello announced
	// idleSince is when its last inbound stream closed (or when it was
	// learned); it only counts while none is open (TCP.inbound).
	idleSince time.Time
}

// TCP is one long-lived TCP stream per peer, dialled by the sender,
// carrying length-prefixed raft messages. The first frame of a stream is a
// hello naming the sender, the intended receiver and the sender's client
// address, which is how followers learn where to redirect clients, and
// (with a cluster identity) its peer address, which is how a member whose
// log does not know the sender yet can answer it (learn).
type TCP struct {
	id         uint64
	listenAddr string
	clientAddr string
	apiAddr    string // announced on accepted streams (announce.go)
	peerAddr   string // where peers dial this member, announced in hellos
	log        *slog.Logger
	// peers is replaced whole (SetPeers) and read without a lock on the
	// send path.
	peers atomic.Pointer[map[uint64]*peerSender]

	mu          sync.Mutex
	removed     map[uint64]bool         // ids removed from the configuration (SetPeers)
	learned     map[uint64]*learnedPeer // peers known only from their hellos (learn)
	inbound     map[uint64]int          // accepted streams open, per sender id past its hello
	streams     map[uint64][]*inStream  // the same streams, oldest first (MaxStreamsPerMember)
	clientAddrs map[uint64]string
	apiAddrs    map[uint64]string // what the receivers of this member's streams announced (announce.go)
	conns       map[net.Conn]struct{}
	ln          net.Listener
	handler     Handler
	tls         *tlsconfig.Reloader // nil: plain TCP (see tls.go)
	identity    *Identity           // nil: hellos carry no cluster identity (identity.go)

	lim limits
	// pending holds the inbound connections before their hello passed
	// (pending.go).
	pending *pendingPool
	// onAcceptError and onRefused feed the member's metrics
	// (Config.OnAcceptError, Config.OnRefused); nil: not counted.
	onAcceptError func()
	onRefused     func(limit string)
	// serverTLS is the peer port's TLS configuration (nil: plain TCP).
	serverTLS *tls.Config
	// wrapTestListener wraps the listener in tests (Config.wrapListener).
	wrapTestListener func(net.Listener) net.Listener
	// failingAfter is how long accepts must fail in a row before
	// ListenerErr reports it (listenerFailingAfter); acceptMu guards
	// the accept loop's record of its failures.
	failingAfter time.Duration
	acceptMu     sync.Mutex
	acceptFails  acceptFailures
	// snap is how snapshots stream (snapshot.go); snapIn marks the
	// senders with an inbound snapshot stream open, one each (under mu).
	snap   snapshotConfig
	snapIn map[uint64]bool
	// learnedExpiry is how long a learned peer without an inbound stream
	// stays (DefaultLearnedExpiry); now is the clock it is measured on
	// (time.Now; tests step their own).
	learnedExpiry time.Duration
	now           func() time.Time
	// refusals logs each reason for closing a peer connection once per
	// repeatWindow (a refused peer redials every peerRedialPeriod).
	refusals *repeats

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewTCP returns the transport cfg describes; Start runs it.
func NewTCP(cfg Config) (*TCP, error) {
	id, peers := cfg.ID, cfg.Peers
	if _, ok := peers[id]; !ok {
		return nil, fmt.Errorf("member %d is not in the peer list", id)
	}
	listen := cfg.Listen
	if listen == "" {
		listen = peers[id]
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &TCP{
		id: id, listenAddr: listen, clientAddr: cfg.ClientAddr, apiAddr: cfg.APIAddr, peerAddr: peers[id], log: log.With("component", "transport"),
		clientAddrs: map[uint64]string{id: cfg.ClientAddr}, apiAddrs: map[uint64]string{}, learned: map[uint64]*learnedPeer{}, inbound: map[uint64]int{},
		streams: map[uint64][]*inStream{}, failingAfter: listenerFailingAfter,
		conns: make(map[net.Conn]struct{}), ctx: ctx, cancel: cancel, lim: newLimits(),
		snap: newSnapshotConfig(), snapIn: map[uint64]bool{},
		learnedExpiry: DefaultLearnedExpiry, now: time.Now, refusals: newRepeats(repeatWindow, time.Now),
	}
	cfg.apply(t)
	senders := make(map[uint64]*peerSender)
	for pid, addr := range peers {
		if pid != id {
			senders[pid] = t.newSender(pid, addr)
		}
	}
	t.peers.Store(&senders)
	return t, nil
}

// SetPeers makes peers (id to peer address; this member's own entry is
// ignored) the members this transport sends to and accepts streams from,
// as a configuration change applies: a new member gets a sender, a removed
// one loses its sender and its inbound streams are refused from then on.
// A member whose address changed is dialled at the new one. A peer
// learned from its hello stays until peers names it (then its address
// there wins), removed does, or it has had no inbound stream open for the
// learned expiry (forgetIdle).
func (t *TCP) SetPeers(peers map[uint64]string, removed []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removed = make(map[uint64]bool, len(removed))
	for _, id := range removed {
		t.removed[id] = true
	}
	peers = maps.Clone(peers)
	for id, lp := range t.learned {
		if _, ok := peers[id]; ok || t.removed[id] {
			delete(t.learned, id)
			continue
		}
		peers[id] = lp.addr
	}
	old := *t.peers.Load()
	next := make(map[uint64]*peerSender, len(peers))
	var stop []*peerSender
	for id, p := range old {
		if addr, ok := peers[id]; ok && addr == p.addr {
			next[id] = p
		} else {
			stop = append(stop, p)
		}
	}
	var start []*peerSender
	for id, addr := range peers {
		if _, ok := next[id]; !ok && id != t.id {
			p := t.newSender(id, addr)
			next[id], start = p, append(start, p)
		}
	}
	t.peers.Store(&next)
	for _, p := range stop {
		p.cancel()
		t.log.Info("stopped sending to a removed peer", "peer", p.id, "addr", p.addr)
	}
	if t.handler == nil || t.ctx.Err() != nil {
		return // Start runs the senders
	}
	for _, p := range start {
		t.log.Info("sending to a new peer", "peer", p.id, "addr", p.addr)
		t.wg.Add(1)
		go p.run()
	}
}

// isPeer says whether id is one of this transport's peers.
func (t *TCP) isPeer(id uint64) bool {
	_, ok := (*t.peers.Load())[id]
	return ok
}

// Start implements Transport.
func (t *TCP) Start(h Handler) error {
	if err := t.snap.openSpool(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", t.listenAddr)
	if err != nil {
		t.snap.closeSpool()
		return fmt.Errorf("listen for peers on %s: %w", t.listenAddr, err)
	}
	if t.wrapTestListener != nil {
		ln = t.wrapTestListener(ln)
	}
	if t.tls != nil {
		t.serverTLS = t.tls.PeerServerConfig()
	}
	t.mu.Lock()
	defer t.mu.Unlock() // SetPeers starts the senders it adds only after this
	t.ln, t.handler = ln, h
	t.wg.Add(2)
	go t.accept(ln)
	go t.expireLearned()
	for _, p := range *t.peers.Load() {
		t.wg.Add(1)
		go p.run()
	}
	return nil
}

// Send implements Transport. It never blocks: each peer's sender goroutine
// writes what is queued. (Writing from the raft loop when the stream was
// idle saved little, and a write that hit its deadline under load tore the
// stream down, which sent raft's replication to that peer into probing, one
// append per heartbeat: p50 of 24 ms at 16 clients.)
func (t *TCP) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		p, ok := (*t.peers.Load())[m.GetTo()]
		if !ok {
			continue
		}
		select {
		case p.queue <- m:
		default:
			t.handler.ReportUnreachable(p.id)
			if m.GetType() == raftpb.MessageType_MsgSnap {
				t.handler.ReportSnapshot(p.id, true)
			}
		}
	}
}

// PeerClientAddr implements Transport.
func (t *TCP) PeerClientAddr(id uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.clientAddrs[id]
}

// Close implements Transport.
func (t *TCP) Close() error {
	t.cancel()
	t.mu.Lock()
	if t.ln != nil {
		t.ln.Close()
	}
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
	t.snap.closeSpool()
	return nil
}

func (t *TCP) track(c net.Conn, add bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if add {
		if t.ctx.Err() != nil {
			return false
		}
		t.conns[c] = struct{}{}
	} else {
		delete(t.conns, c)
	}
	return true
}

// accept accepts peer connections until the transport closes. A failed
// accept (out of file descriptors, say) is retried after a pause that
// doubles from acceptRetryMin to acceptRetryMax, as net/http's Server
// does: returning would leave the member unreachable by its peers for
// good, while the cause may pass.
func (t *TCP) accept(ln net.Listener) {
	defer t.wg.Done()
	var pause time.Duration
	for {
		raw, err := ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			pause = min(max(2*pause, acceptRetryMin), acceptRetryMax)
			t.acceptFailed(err, pause)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		t.acceptSucceeded()
		t.admit(raw)
	}
}

// admit serves an accepted connection: pending (pending.go) until its
// hello passed, a member's stream after.
func (t *TCP) admit(raw net.Conn) {
	pc := &pendingConn{raw: raw, host: remoteHost(raw)}
	var c net.Conn = spokeConn{raw, pc}
	if t.serverTLS != nil {
		c = tls.Server(c, t.serverTLS)
	}
	if !t.track(raw, true) {
		raw.Close()
		return
	}
	// The hello deadline is set before the connection can be evicted:
	// a pending connection always has one.
	raw.SetDeadline(time.Now().Add(t.lim.helloTimeout))
	if evicted, limit := t.pending.add(pc); evicted != nil {
		evicted.raw.Close()
		t.refused(limit)
		t.log.Debug("closed a pending peer connection to make room", "remote", evicted.raw.RemoteAddr().String(), "limit", limit)
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer t.track(raw, false)
		defer c.Close()
		err := t.serve(c, pc)
		if t.pending.remove(pc) && idle(err) {
			t.refused(LimitHelloTimeout) // still pending: the hello deadline ended it
		}
		if err == nil || t.ctx.Err() != nil || pc.evicted.Load() || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || idle(err) {
			return
		}
		if ok, held := t.refusals.log(err.Error()); ok {
			t.log.Warn("closed peer connection", "remote", raw.RemoteAddr().String(), "reason", err, "same_reason_since_last_line", held)
		}
	}()
}

// serve reads one inbound peer stream, pending (pc) until its hello
// passed. Anything malformed closes the stream with a reason; it never
// reaches raft.
func (t *TCP) serve(c net.Conn, pc *pendingConn) error {
	if err := t.handshake(c); err != nil {
		return err
	}
	dr := &deadlineReader{c: c} // no per-read deadline while pending: the hello deadline holds
	r := bufio.NewReaderSize(dr, 64<<10)
	if first, _ := r.Peek(len(wire.Greeting)); string(first) == wire.Greeting {
		// A client pointed at the peer port: answer something that is not
		// a greeting, so it says "not a raftlock client port" at once
		// instead of retrying until its deadline.
		io.WriteString(c, "raftlock peer port: clients use the client port\n")
		t.log.Debug("client greeting on the peer port", "remote", c.RemoteAddr().String())
		return nil
	}
	hello, err := readFrame(r, 1024)
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	from, to, clientAddr, ext, err := decodeHello(hello)
	if err != nil {
		return err
	}
	if to != t.id {
		return fmt.Errorf("hello for member %d reached member %d", to, t.id)
	}
	known := t.isPeer(from)
	if err := t.checkSender(c, from); err != nil {
		return err
	}
	if !known {
		t.mu.Lock()
		removed := t.removed[from]
		t.mu.Unlock()
		// Only a member of this cluster is told: the notice stops the
		// member that reads it for good, and a member of another cluster
		// that reached this one (an address reused, say) was not removed.
		if removed && t.sameCluster(ext) {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(c, removedNotice)
			return fmt.Errorf("refused member %d: it was removed from the cluster (told it so)", from)
		}
	}
	incarnation, peerAddr, err := t.checkIdentity(from, ext)
	if err != nil {
		return err
	}
	// The hello passed: the connection leaves the pending pool (unless
	// the pool evicted it meanwhile) and counts as member from's.
	if !t.pending.remove(pc) {
		return errEvicted
	}
	c.SetDeadline(time.Time{})
	dr.d = t.lim.readTimeout
	s, err := t.openInbound(from, peerAddr, clientAddr, pc.raw)
	if err != nil {
		return err
	}
	defer t.closeInbound(from, s)
	for first := true; ; first = false {
		frame, err := readFrame(r, t.snap.frameLimit)
		if err != nil {
			return err
		}
		if first && string(frame) == snapshotStreamMarker {
			t.markSnapshotStream(s)
			return t.serveSnapshot(c, r, from)
		}
		if first {
			t.announceAPI(c)
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(frame, m); err != nil {
			return fmt.Errorf("decode raft message from %d: %w", from, err)
		}
		if m.GetFrom() != from || m.GetTo() != t.id {
			return fmt.Errorf("message %d->%d on the stream %d->%d", m.GetFrom(), m.GetTo(), from, t.id)
		}
		if !t.isPeer(from) {
			return fmt.Errorf("member %d left the configuration", from)
		}
		if err := t.noteAck(from, incarnation, m); err != nil {
			return err
		}
		t.handler.Receive(m)
	}
}

// openInbound counts a stream from member from that passed its hello's
// checks, learning from (learn) if it is not a peer, and records the
// client address it announced. Both happen under one lock, so a learned
// peer cannot be forgotten between being learned and its stream counting.
// When from has MaxStreamsPerMember message streams open already, the
// oldest is closed: a member's sender keeps one stream, so the others are
// ones it gave up on (their ends here last until the read timeout). raw
// is the stream's TCP connection. closeInbound undoes the count.
func (t *TCP) openInbound(from uint64, peerAddr, clientAddr string, raw net.Conn) (*inStream, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.isPeer(from) {
		if err := t.learn(from, peerAddr); err != nil {
			return nil, err
		}
	}
	messages := 0
	for _, s := range t.streams[from] {
		if !s.snapshot {
			messages++
		}
	}
	if messages >= t.lim.maxStreamsPerMember {
		for _, s := range t.streams[from] {
			if !s.snapshot {
				s.raw.Close() // its goroutine ends and undoes its count
				t.refused(LimitStreamsPerMember)
				t.log.Debug("closed the oldest stream of a member that opened one more", "peer", from, "limit", t.lim.maxStreamsPerMember)
				break
			}
		}
	}
	s := &inStream{raw: raw}
	t.streams[from] = append(t.streams[from], s)
	t.inbound[from]++
	t.clientAddrs[from] = clientAddr
	return s, nil
}

// markSnapshotStream says s carries a snapshot, bounded apart (one per
// member, claimSnapshotIn), so it is never closed for a message stream.
func (t *TCP) markSnapshotStream(s *inStream) {
	t.mu.Lock()
	s.snapshot = true
	t.mu.Unlock()
}

func (t *TCP) closeInbound(from uint64, s *inStream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.streams[from], s); i >= 0 {
		t.streams[from] = slices.Delete(t.streams[from], i, i+1)
	}
	if len(t.streams[from]) == 0 {
		delete(t.streams, from)
	}
	if t.inbound[from]--; t.inbound[from] > 0 {
		return
	}
	delete(t.inbound, from)
	if lp, ok := t.learned[from]; ok {
		lp.idleSince = t.now()
	}
}

// learn makes id, unknown to the address book and the flags, a peer
// at addr, the peer address its hello announced. Such a member is one
// added by log entries this member has not applied yet (it was down
// meanwhile), and it may be the leader: refusing it, or not answering it,
// would leave this member unable ever to learn of it. Only a hello that
// passed the cluster id and incarnation checks (and, with TLS, whose
// certificate is that member's) gets here, and never one from a removed
// id: a member of another cluster, a wiped member or a removed one is
// still refused. What such a peer may make raft do is the member core's
// call (member.Core.Step). It stays a peer while it keeps a stream to
// this member open, and is forgotten once it has had none for the learned
// expiry (forgetIdle); a later hello learns it again. The caller holds
// t.mu and has checked id is not a peer.
func (t *TCP) learn(id uint64, addr string) error {
	if t.identity == nil {
		return fmt.Errorf("hello from unknown member %d (without a cluster identity, only known members are taken)", id)
	}
	if addr == "" {
		return fmt.Errorf("hello from unknown member %d, which announces no peer address", id)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("hello from unknown member %d: bad peer address %q: %w", id, addr, err)
	}
	if t.removed[id] {
		return fmt.Errorf("refused member %d: it was removed from the cluster", id)
	}
	if len(t.learned) >= maxLearnedPeers {
		t.forgetIdleLocked() // the sweep may not have run since slots expired
	}
	if len(t.learned) >= maxLearnedPeers {
		return fmt.Errorf("hello from unknown member %d refused: %d members unknown to the address book are peers already", id, len(t.learned))
	}
	t.learned[id] = &learnedPeer{addr: addr, idleSince: t.now()}
	next := maps.Clone(*t.peers.Load())
	p := t.newSender(id, addr)
	next[id] = p
	t.peers.Store(&next)
	t.log.Info("a member this member's log does not know yet says hello; answering it at the address it announced until the log names it",
		"peer", id, "addr", addr)
	if t.handler != nil && t.ctx.Err() == nil {
		t.wg.Add(1) // the stream being opened holds the group open: no race with Close's Wait
		go p.run()
	}
	return nil
}

// expireLearned sweeps out idle learned peers (forgetIdle) a few times
// per expiry, so one is forgotten at most a quarter expiry late.
func (t *TCP) expireLearned() {
	defer t.wg.Done()
	tick := time.NewTicker(max(t.learnedExpiry/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
			t.forgetIdle()
		}
	}
}

// forgetIdle forgets the learned peers that have had no inbound stream
// open for the learned expiry: each one's sender stops (no more dials to
// the address it announced), its slot frees, and its streams, should one
// open meanwhile, learn it again. A peer the address book names is never
// in learned, so never forgotten here.
func (t *TCP) forgetIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetIdleLocked()
}

func (t *TCP) forgetIdleLocked() {
	now := t.now()
	var next map[uint64]*peerSender
	for id, lp := range t.learned {
		if t.inbound[id] > 0 || now.Sub(lp.idleSince) < t.learnedExpiry {
			continue
		}
		if next == nil {
			next = maps.Clone(*t.peers.Load())
		}
		delete(t.learned, id)
		delete(t.clientAddrs, id)
		if p, ok := next[id]; ok {
			delete(next, id)
			p.cancel()
		}
		t.log.Info("forgot a member known only from its hello: no stream from it for the learned expiry",
			"peer", id, "addr", lp.addr, "idle", now.Sub(lp.idleSince).Round(time.Millisecond))
	}
	if next != nil {
		t.peers.Store(&next)
	}
}

func AppendFrame(b, payload []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

func EncodeHello(from, to uint64, clientAddr string) []byte {
	b := []byte(peerMagic)
	b = binary.AppendUvarint(b, from)
	b = binary.AppendUvarint(b, to)
	b = binary.AppendUvarint(b, uint64(len(clientAddr)))
	return append(b, clientAddr...)
}

// decodeHello returns, besides the fields EncodeHello writes, the bytes
// after the address: the sender's cluster identity (identity.go).
func decodeHello(b []byte) (from, to uint64, clientAddr string, ext []byte, err error) {
	if len(b) < len(peerMagic) || string(b[:len(peerMagic)]) != peerMagic {
		return 0, 0, "", nil, errors.New("not a raftlock peer hello")
	}
	b = b[len(peerMagic):]
	var vals [3]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, 0, "", nil, errors.New("truncated peer hello")
		}
		vals[i], b = v, b[n:]
	}
	if vals[2] > uint64(len(b)) {
		return 0, 0, "", nil, errors.New("bad address length in peer hello")
	}
	return vals[0], vals[1], string(b[:vals[2]]), b[vals[2]:], nil
}

// Package server is a member's client side: the client protocol (framed,
// pipelined requests onto the node's API) and the HTTP endpoints (/metrics,
// /status, /healthz, the audit log).
package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// Server serves the client protocol (package wire) for one member.
type Server struct {
	node *node.Node
	log  *slog.Logger

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]func() // each connection's goaway (Shutdown); nil until its greeting is done
	greeted int                 // connections past their greeting (Limits.MaxConns)
	pending pendingConns        // connections before it (admission.go)
	closed  bool
	wg      sync.WaitGroup

	auth    auth // the ACL (acl.go)
	lim     limiter
	quota   quota    // what each identity holds (quota.go)
	watches watchSet // open watches, rechecked when the ACL changes (watch.go)

	adminCmds map[string]adminCommand // admin.go
	captures  captureCache            // snapshot.save's (snapshot.go)
	relay     *client.Relay           // forwards API calls to the leader (forward.go); nil: redirect them
}

// New returns a client server for n.
func New(n *node.Node) *Server {
	return &Server{node: n, log: n.Logger().With("component", "server"), conns: make(map[net.Conn]func()),
		adminCmds: adminCommands()}
}

// Serve accepts client connections on ln until Close, and returns nil
// then. A failed accept (out of file descriptors, say) is retried after a
// backoff, counted, and reported to the node while it lasts (/healthz):
// the port must serve again once the cause is gone. It returns an error
// only when ln was closed by someone other than Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	s.ln = ln
	s.mu.Unlock()
	var backoff acceptBackoff
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				s.node.ReportListener("client", err)
				return err
			}
			s.acceptFailed(&backoff, "client", err)
			continue
		}
		s.accepted(&backoff, "client")
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = nil // its goaway is set once the greeting is done (serveConn)
		s.wg.Add(1)
		s.mu.Unlock()
		s.admitPending(c)
		go s.serveConn(c)
	}
}

// Shutdown stops accepting connections and tells every client to move on
// (a goaway, wire.GoAwayID; a connection still exchanging greetings gets
// it right after its greeting), then keeps answering what clients still send
// (requests written before they read the goaway) until they have closed
// their connections or ctx ends; then it closes. A client never sees a
// connection break under a request it sent, which it would have to report
// as an unknown outcome.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for _, goAway := range s.conns {
		if goAway != nil {
			goAway()
		}
	}
	s.mu.Unlock()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		open := len(s.conns)
		s.mu.Unlock()
		if open == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return s.Close()
		case <-tick.C:
		}
	}
	return s.Close()
}

// Close stops accepting and closes every connection (which cancels their
// requests).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// serveConn reads requests and runs each in its own goroutine; a writer
// coalesces answers. A malformed frame closes the connection with a logged
// reason; closing cancels every request still open on it, which is how a
// vanished client's queued or in-flight acquires become "requester gone".
func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	cc := &clientConn{s: s, c: c, ctx: ctx, cancels: map[uint64]context.CancelFunc{}, slots: newConnSlots(s.limits().MaxInflightPerConn)}
	cc.out = wire.NewWriter(deadlineWriter{c}, func(err error) {
		cc.closing(err)
		c.Close() // the reader fails next, which cancels this connection's requests
	})
	defer func() {
		cancel()
		c.Close()
		cc.reqWG.Wait()
		cc.out.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	r := bufio.NewReaderSize(c, 32<<10)
	var unplace func()
	err := s.greet(c, r, func() bool {
		var ok bool
		unplace, ok = s.admitGreeted(c, identity(c))
		return ok
	})
	stillPending := s.pending.remove(c) // false: admitted, or evicted (and counted)
	if unplace != nil {
		// Admitted: its places go back when the connection ends, even
		// if the member's greeting then fails to go out (a client that
		// greets and resets would leak one each).
		defer unplace()
	}
	if err != nil {
		if stillPending && !errors.Is(err, errRefused) {
			// At most a line a second: a flood of connections that never
			// greet would write one each.
			s.lim.greetWarn.every(time.Second, func() { cc.closing(err) })
		}
		return
	}
	// The goaway may go out only now: sent before the greeting, the client
	// reads its bytes as the greeting and takes this member for something
	// other than raftlock, failing its call instead of retrying it
	// elsewhere. Installing it and checking for a Shutdown already begun
	// under s.mu, which Shutdown holds while it sends its goaways, makes
	// sure this connection gets exactly one, whenever Shutdown began.
	goAway := func() {
		cc.out.Write(func(b []byte) []byte {
			return wire.AppendResponse(b, &wire.Response{ID: wire.GoAwayID, Op: wire.OpUnavailable, Reason: "member stopping"})
		})
	}
	s.mu.Lock()
	stopping := s.closed
	if !stopping {
		s.conns[c] = goAway
	}
	s.mu.Unlock()
	if stopping {
		goAway()
	}
	cc.who = identity(c)
	go cc.watchIdle(s.limits().IdleTimeout, goAway)
	if err := cc.readLoop(r); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, context.Canceled) {
		cc.closing(err)
	}
}

// clientConn is one greeted client connection: its writer, and the
// requests it has in flight, each cancellable by id.
type clientConn struct {
	s        *Server
	c        net.Conn
	ctx      context.Context // ends when the connection does
	out      *wire.Writer
	who      string
	features uint64 // what the client announced it understands
	slots    connSlots
	idle     idleTimer
	reqWG    sync.WaitGroup
	cmu      sync.Mutex
	cancels  map[uint64]context.CancelFunc
}

func (cc *clientConn) closing(reason error) {
	cc.s.log.Warn("closing client connection", "remote", cc.c.RemoteAddr().String(), "reason", reason)
}

func (cc *clientConn) answerInvalid(id uint64, reason string) {
	resp := &wire.Response{ID: id, Op: wire.OpInvalidArgument, Reason: reason}
	cc.out.Write(func(b []byte) []byte { return wire.AppendResponse(b, resp) })
}

// readLoop reads requests until the connection ends or the client breaks
// the protocol, answering what it can answer without the stream losing
// step: a frame skipped whole for its size, a known request with a bad
// field. Its error says why it stopped.
func (cc *clientConn) readLoop(r *bufio.Reader) error {
	for {
		body, err := wire.ReadFrame(r)
		if oe := (*wire.OversizedFrameError)(nil); errors.As(err, &oe) && oe.Skipped {
			// Skipped whole: the stream is still in step, so answer it.
			cc.answerInvalid(oe.ID, fmt.Sprintf("request of %d bytes exceeds the limit of %d bytes", oe.Size, wire.MaxFrame))
			continue
		}
		if err != nil {
			return err
		}
		req, err := wire.DecodeRequest(body)
		if _, id, ok := wire.RequestHeader(body); err != nil && ok {
			// A known request with a bad field: the frame was whole.
			cc.answerInvalid(id, err.Error())
			continue
		}
		if err != nil {
			return err
		}
		if err := cc.dispatch(&req); err != nil {
			return err
		}
	}
}

// dispatch takes one decoded request: a feature announcement or a cancel
// at once, anything else in a goroutine of its own once it has an
// in-flight slot. An error closes the connection.
func (cc *clientConn) dispatch(req *wire.Request) error {
	switch req.Op {
	case wire.OpStatus:
		if req.Features != 0 {
			cc.features = req.Features // the client's announcement: no answer
			return nil
		}
	case wire.OpCancel:
		cc.cmu.Lock()
		if f, ok := cc.cancels[req.ID]; ok {
			f()
		}
		cc.cmu.Unlock()
		return nil
	}
	release, err := cc.slots.take(cc.ctx, req)
	if cc.ctx.Err() != nil {
		return cc.ctx.Err()
	}
	if err != nil {
		cc.s.answerOverloaded(cc.out, req.ID, err)
		return nil
	}
	rctx, rcancel := context.WithCancel(cc.ctx)
	cc.cmu.Lock()
	_, dup := cc.cancels[req.ID]
	if !dup {
		cc.cancels[req.ID] = rcancel
	}
	cc.cmu.Unlock()
	if dup {
		// A second request under an id still in flight: no answer could
		// say which of the two it is for, so this client breaks the
		// protocol. Closing cancels the first request (a grant that still
		// applies is released as a ghost).
		rcancel()
		release()
		return fmt.Errorf("request id %d reused while in flight", req.ID)
	}
	feats := cc.features
	done := cc.idle.start()
	cc.reqWG.Go(func() {
		defer done()
		var resp *wire.Response
		if req.Op == wire.OpWatch {
			resp = cc.streamWatch(rctx, feats, req)
		} else {
			resp = cc.s.Do(rctx, cc.who, feats, req)
		}
		cc.cmu.Lock()
		delete(cc.cancels, req.ID)
		cc.cmu.Unlock()
		rcancel()
		release()
		if resp != nil {
			cc.out.Write(func(b []byte) []byte { return wire.AppendResponse(b, resp) })
		}
	})
	return nil
}

// errRefused is greet's error for a connection admit did not take.
var errRefused = errors.New("connection refused by a limit")

// greet exchanges the protocol greeting: the client's first (over TLS,
// the handshake comes with it), then this member's, both within
// Limits.HandshakeTimeout. admit decides, between the two, whether the
// connection may stay: one it refuses is closed before the member's
// greeting, which a client takes as "not sent" and retries. A client of
// another version gets this member's greeting (so it can say which
// versions differ) before the connection closes.
func (s *Server) greet(c net.Conn, r *bufio.Reader, admit func() bool) error {
	c.SetDeadline(time.Now().Add(s.limits().HandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	err := wire.CheckGreeting(r)
	tellTLSRequired(err)
	if err == nil && !admit() {
		return errRefused
	}
	if err == nil || errors.Is(err, wire.ErrVersion) {
		if _, werr := io.WriteString(c, wire.Greeting); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// Do runs one request of the client identity who (Identity; "" without a
// client certificate) as the client port runs it: refused when the ACL
// does not allow it, else Handle, a forced release logged with who asked.
// features are the answers the client understands (wire.Feature*): a
// refusal is OpPermissionDenied only for a client that announced it. The
// answer is nil when ctx ended first and nobody waits for one; ending ctx
// is how a requester leaves (a grant that applies after is released, rule
// 7). The client port and the HTTP/JSON API (package httpapi) both call it.
func (s *Server) Do(ctx context.Context, who string, features uint64, req *wire.Request) *wire.Response {
	sender := who
	who, ok := vouched(who, req)
	if !ok {
		return s.refusal(sender, features, req.ID, "member", "relay a call for another identity (only a member's certificate may)", "")
	}
	if resp := s.refuse(who, features, req); resp != nil {
		return resp
	}
	if !holdsCallUnit(ctx) {
		release, err := s.Admit(who, LimitCalls)
		if err != nil {
			return s.overloaded(opLabel(req.Op), req.ID, err)
		}
		defer release()
	}
	if req.Op == wire.OpAcquire && req.WaitMS > 0 {
		release, err := s.admitWaiter(who, req.Key)
		if err != nil {
			return s.overloaded(opLabel(req.Op), req.ID, err)
		}
		defer release()
	}
	resp := s.Handle(ctx, req)
	if resp != nil && resp.Op == wire.OpRedirect && !req.Forwarded && forwarding(ctx) {
		if relay := s.relayer(); relay != nil {
			// The leader logs a forced release it decides, with who asked.
			return s.forward(ctx, relay, who, req, resp)
		}
	}
	if req.Force && resp != nil {
		s.logForced(who, req, resp)
	}
	return resp
}

// Handle runs one request, with no ACL check (Do checks it), and returns
// its answer, or nil when the request was cancelled and nobody waits for
// an answer.
func (s *Server) Handle(ctx context.Context, req *wire.Request) *wire.Response {
	n := s.node
	resp := &wire.Response{ID: req.ID}
	var err error
	op := "status"
	start := time.Now()
	defer func() { n.Metrics().RequestSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds()) }()
	switch req.Op {
	case wire.OpAcquire:
		op = member.OpAcquire.String()
		if err = checkArgs(req); err != nil {
			break
		}
		var tok uint64
		lease := time.Duration(req.LeaseMS) * time.Millisecond // bounded by checkArgs
		wait := time.Duration(min(req.WaitMS, uint64(24*time.Hour/time.Millisecond))) * time.Millisecond
		if tok, err = n.AcquireAs(ctx, req.Key, req.Owner, lease, wait, req.Tag); err == nil {
			resp.Op, resp.Token, resp.LeaseMS = wire.OpGranted, tok, req.LeaseMS
		}
	case wire.OpRelease:
		op = member.OpRelease.String()
		if req.Force {
			var tok uint64
			if tok, err = n.ForceRelease(ctx, req.Key, req.Tag); err == nil {
				resp.Op, resp.Token = wire.OpReleased, tok
			}
		} else if err = n.Release(ctx, req.Key, req.Token, req.Tag); err == nil {
			resp.Op = wire.OpReleased
		}
	case wire.OpRenew:
		op = member.OpRenew.String()
		if err = checkArgs(req); err != nil {
			break
		}
		lease := time.Duration(req.LeaseMS) * time.Millisecond // bounded by checkArgs
		if err = n.Renew(ctx, req.Key, req.Token, lease, req.Tag); err == nil {
			resp.Op = wire.OpRenewed
		}
	case wire.OpGet:
		op = member.OpGet.String()
		var info node.LockInfo
		if info, err = n.Get(ctx, req.Key, req.Stale); err == nil {
			resp.Op, resp.Held, resp.Token, resp.RemainingMS, resp.Owner = wire.OpValue, info.Held, info.Token, uint64(info.RemainingMS), info.Owner
		}
	case wire.OpList:
		op = member.OpList.String()
		if err = checkArgs(req); err != nil {
			break
		}
		var page member.LockList
		if page, err = n.List(ctx, req.Prefix, req.After, int(req.Limit), req.Stale); err == nil { // bounded by checkArgs
			resp.Op, resp.More = wire.OpLocks, page.More
			resp.Locks = make([]wire.Lock, len(page.Locks))
			for i, l := range page.Locks {
				resp.Locks[i] = wire.Lock{Key: l.Key, Token: l.Token, Owner: l.Owner, RemainingMS: uint64(l.RemainingMS)}
			}
		}
	case wire.OpStatus:
		var st node.Status
		if st, err = n.Status(ctx); err == nil {
			resp.Op, resp.Status = wire.OpStatusInfo, st
		}
	case wire.OpAdmin:
		op = "admin"
		err = s.admin(ctx, req, resp)
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			n.Metrics().ClientRequests.WithLabelValues(op, "cancelled").Inc()
			return nil
		}
		errorResponse(resp, err)
	}
	n.Metrics().ClientRequests.WithLabelValues(op, resultLabel(resp.Op)).Inc()
	return resp
}

// checkArgs refuses what the member could only take clamped or should not
// take at all: a new key or owner that breaks the key rule
// (wire.ValidateKey: the client port's entry, which the HTTP/JSON and gRPC
// APIs go through too), and numbers out of range, named as given (a lease
// of 2^64-1 ms is not "1h0m0.001s"). The member checks its own bounds
// again; the key rule is the entries' alone, so keys stored before it
// stay readable and releasable.
func checkArgs(req *wire.Request) error {
	var errs []error
	switch req.Op {
	case wire.OpAcquire:
		errs = []error{wire.ValidateKey(req.Key), wire.ValidateOwner(req.Owner), wire.ValidateLeaseMS(req.LeaseMS)}
	case wire.OpRenew:
		errs = []error{wire.ValidateLeaseMS(req.LeaseMS)}
	case wire.OpList:
		errs = []error{wire.ValidateListLimit(req.Limit)}
	}
	for _, err := range errs {
		if err != nil {
			return &node.InvalidArgumentError{Reason: err.Error()}
		}
	}
	return nil
}

// logForced records a forced release at WARN, with who asked: an operator
// ended someone's hold.
func (s *Server) logForced(who string, req *wire.Request, resp *wire.Response) {
	if who == "" {
		who = "(no client certificate)"
	}
	if resp.Op == wire.OpReleased {
		s.log.Warn("forced release", "identity", who, "key", req.Key, "token", resp.Token)
		return
	}
	attrs := []any{"identity", who, "key", req.Key, "answer", resultLabel(resp.Op)}
	if resp.Reason != "" {
		attrs = append(attrs, "reason", resp.Reason)
	}
	s.log.Warn("forced release did not release", attrs...)
}

// deadlineWriter bounds each write, so a client that stops reading ends its
// own connection instead of holding its request goroutines forever.
type deadlineWriter struct{ c net.Conn }

func (d deadlineWriter) Write(b []byte) (int, error) {
	d.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return d.c.Write(b)
}

func errorResponse(resp *wire.Response, err error) {
	var nl *node.NotLeaderError
	var inv *node.InvalidArgumentError
	switch {
	case errors.Is(err, node.ErrHeld):
		resp.Op = wire.OpHeld
	case errors.Is(err, node.ErrNotFound):
		resp.Op = wire.OpNotFound
	case errors.As(err, &nl):
		if nl.LeaderAddr != "" {
			resp.Op, resp.LeaderID, resp.Leader = wire.OpRedirect, nl.LeaderID, nl.LeaderAddr
		} else {
			resp.Op, resp.Reason = wire.OpUnavailable, "no leader known"
		}
	case errors.As(err, &inv):
		resp.Op, resp.Reason = wire.OpInvalidArgument, inv.Reason
	case errors.Is(err, node.ErrOutcomeUnknown):
		resp.Op, resp.Reason = wire.OpOutcomeUnknown, reason(err, node.ErrOutcomeUnknown,
			"leadership changed while the command was in flight: it may or may not apply")
	case errors.Is(err, node.ErrOverloaded):
		resp.Op, resp.Reason = wire.OpOverloaded, reason(err, node.ErrOverloaded, "a limit of the member was reached")
	case errors.Is(err, node.ErrUnavailable):
		resp.Op, resp.Reason = wire.OpUnavailable, reason(err, node.ErrUnavailable,
			"the call cannot be decided now; try again")
	case errors.Is(err, node.ErrStopped), errors.Is(err, member.ErrChangeInProgress):
		resp.Op, resp.Reason = wire.OpUnavailable, err.Error()
	default:
		resp.Op, resp.Reason = wire.OpError, err.Error()
	}
}

// reason is why err, an error of kind, was answered, without the name of
// kind that err's text starts with: the answer's op already says it, and
// the APIs put its name before the reason ("unavailable: unavailable: the
// leader is handing leadership over" said it twice). An error that is
// kind alone says no more than the op, so its reason is what the op
// means, bare.
func reason(err, kind error, bare string) string {
	if err == kind {
		return bare
	}
	if r, ok := strings.CutPrefix(err.Error(), kind.Error()+": "); ok {
		return r
	}
	return err.Error()
}

// opLabel is the metrics' name of a request's op.
func opLabel(op wire.Op) string {
	switch op {
	case wire.OpAcquire:
		return member.OpAcquire.String()
	case wire.OpRelease:
		return member.OpRelease.String()
	case wire.OpRenew:
		return member.OpRenew.String()
	case wire.OpGet:
		return member.OpGet.String()
	case wire.OpList:
		return member.OpList.String()
	case wire.OpAdmin:
		return "admin"
	case wire.OpWatch:
		return "watch"
	}
	return "status"
}

func resultLabel(op wire.Op) string {
	switch op {
	case wire.OpGranted:
		return "granted"
	case wire.OpHeld:
		return "held"
	case wire.OpReleased:
		return "released"
	case wire.OpRenewed:
		return "renewed"
	case wire.OpNotFound:
		return "not_found"
	case wire.OpValue, wire.OpStatusInfo, wire.OpLocks:
		return "ok"
	case wire.OpRedirect:
		return "redirect"
	case wire.OpUnavailable:
		return "unavailable"
	case wire.OpInvalidArgument:
		return "invalid_argument"
	case wire.OpOutcomeUnknown:
		return "outcome_unknown"
	case wire.OpOverloaded:
		return "overloaded"
	}
	return "error"
}

package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
)

// Watch starts a watch of the locks under prefix on this member
// (node.Node.Watch) for the identity who. The ACL must let who read
// prefix, the right a list of prefix needs, and who must hold fewer than
// its share of watches (Limits.MaxWatchesPerIdentity), the member fewer
// than Limits.MaxWatches; a refusal, or a prefix longer than a key, comes
// back as the answer the client port gives (a nil watch). The watch ends
// with a *WatchRevokedError when an ACL put in force later (SetACL) no
// longer lets who read prefix.
func (s *Server) Watch(ctx context.Context, who string, features uint64, prefix string, after wire.Revision) (*node.Watch, *wire.Response) {
	if a := s.auth.acl.Load(); a != nil && !a.Allows(who, RightRead, prefix) {
		return nil, s.refusal(who, features, 0, RightRead, fmt.Sprintf("watch %q", prefix), prefix)
	}
	if len(prefix) > wire.MaxKeyLen {
		return nil, &wire.Response{Op: wire.OpInvalidArgument, Reason: fmt.Sprintf("prefix must be at most %d bytes, got %d", wire.MaxKeyLen, len(prefix))}
	}
	release, err := s.Admit(who, LimitWatches)
	if err != nil {
		return nil, s.overloaded("watch", 0, err)
	}
	w, err := s.startWatch(ctx, who, prefix, after)
	if err != nil {
		release()
		if errors.Is(err, node.ErrOverloaded) {
			return nil, s.overloaded("watch", 0, err)
		}
		if compacted := (*node.CompactedError)(nil); errors.As(err, &compacted) {
			return nil, WatchEnded(err)
		}
		resp := &wire.Response{}
		errorResponse(resp, err)
		return nil, resp
	}
	go func() {
		<-w.Done()
		s.watches.remove(w)
		release()
	}()
	return w, nil
}

// startWatch starts and registers a watch, unless the member has
// Limits.MaxWatches open. It registers under the lock SetACL's recheck
// takes, after reading the ACL again: a reload that removed who's right
// meanwhile either sees this watch or was read here.
func (s *Server) startWatch(ctx context.Context, who, prefix string, after wire.Revision) (*node.Watch, error) {
	s.watches.mu.Lock()
	if max := s.limits().MaxWatches; len(s.watches.open) >= max {
		s.watches.mu.Unlock()
		return nil, fmt.Errorf("%w: %d watches open on this member (limit %d, --max-watches)", node.ErrOverloaded, max, max)
	}
	s.watches.mu.Unlock()
	w, err := s.node.Watch(ctx, prefix, after)
	if err != nil {
		return nil, err
	}
	s.watches.mu.Lock()
	defer s.watches.mu.Unlock()
	if s.watches.open == nil {
		s.watches.open = map[*node.Watch]watcher{}
	}
	s.watches.open[w] = watcher{who, prefix}
	if a := s.auth.acl.Load(); a != nil && !a.Allows(who, RightRead, prefix) {
		s.node.EndWatch(w, &WatchRevokedError{Identity: who, Prefix: prefix})
	}
	return w, nil
}

// watchSet is a server's open watches, with whom each is for.
type watchSet struct {
	mu   sync.Mutex
	open map[*node.Watch]watcher
}

type watcher struct{ who, prefix string }

func (ws *watchSet) remove(w *node.Watch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.open, w)
}

// recheckWatches ends each open watch a may not allow (SetACL).
func (s *Server) recheckWatches(a *ACL) {
	if a == nil {
		return
	}
	s.watches.mu.Lock()
	defer s.watches.mu.Unlock()
	for w, wr := range s.watches.open {
		if !a.Allows(wr.who, RightRead, wr.prefix) {
			s.log.Info("watch ended: the ACL no longer allows it", "identity", wr.who, "prefix", wr.prefix)
			s.node.EndWatch(w, &WatchRevokedError{Identity: wr.who, Prefix: wr.prefix})
		}
	}
}

// WatchRevokedError ends a watch whose identity the ACL in force no
// longer lets read its prefix.
type WatchRevokedError struct {
	Identity, Prefix string
}

func (e *WatchRevokedError) Error() string {
	return fmt.Sprintf("identity %q may no longer watch %q (the ACL changed)", e.Identity, e.Prefix)
}

// overloaded is the answer to request id of op refused by a limit (err
// wraps node.ErrOverloaded), counted like every overloaded answer.
func (s *Server) overloaded(op string, id uint64, err error) *wire.Response {
	resp := &wire.Response{ID: id}
	errorResponse(resp, err)
	s.node.Metrics().ClientRequests.WithLabelValues(op, resultLabel(resp.Op)).Inc()
	return resp
}

// WireEvent is ev as the client protocol and the HTTP API carry it.
func WireEvent(ev node.Event) wire.Event {
	return wire.Event{Key: ev.Key, Type: wire.EventType(ev.Type), Token: ev.Token, Owner: ev.Owner, LeaseMS: ev.LeaseMS, Index: ev.Index, Seq: ev.Seq}
}

// WatchEnded is the answer that ends a watch cut off by err (Watch.Err):
// permission denied when the ACL no longer allows it (WatchRevokedError),
// overloaded for a reader too slow (a limit of the member: its buffer),
// compacted for a watch whose revision the member no longer holds events
// after (it caught up by snapshot past it: resume at another member, or
// list again), unavailable for a member that stopped (watch again, here
// or elsewhere), error for anything else.
func WatchEnded(err error) *wire.Response {
	var slow *node.TooSlowError
	var compacted *node.CompactedError
	var revoked *WatchRevokedError
	switch {
	case errors.As(err, &revoked):
		return &wire.Response{Op: wire.OpPermissionDenied, Reason: err.Error()}
	case errors.As(err, &slow):
		return &wire.Response{Op: wire.OpOverloaded, Reason: err.Error()}
	case errors.As(err, &compacted):
		return &wire.Response{Op: wire.OpCompacted, Reason: err.Error(), Kept: compacted.Held}
	case errors.Is(err, node.ErrStopped):
		return &wire.Response{Op: wire.OpUnavailable, Reason: err.Error()}
	case err == nil:
		return &wire.Response{Op: wire.OpError, Reason: "the watch ended"}
	}
	return &wire.Response{Op: wire.OpError, Reason: err.Error()}
}

// maxWatchBacklog bounds the bytes of events a watch leaves in its
// connection's writer: past it, the stream stops taking events until the
// client reads, so a client too slow for its events fills its watch's
// buffer in the node and is cut off there, instead of this member's
// memory filling.
const maxWatchBacklog = 256 << 10

// streamWatch serves one OpWatch on its connection: OpWatching, then one
// OpEvent per event, all under the request's id. It returns the answer
// that ends the stream (a refusal, or why the watch was cut off), nil
// once ctx ends (the client cancelled, or the connection closed).
func (cc *clientConn) streamWatch(ctx context.Context, features uint64, req *wire.Request) *wire.Response {
	if features&wire.FeatureWatch == 0 {
		return &wire.Response{ID: req.ID, Op: wire.OpInvalidArgument, Reason: "a watch needs a client that announced it reads its events"}
	}
	w, resp := cc.s.Watch(ctx, cc.who, features, req.Prefix, req.WatchAfter)
	if resp != nil {
		resp.ID = req.ID
		return resp
	}
	cc.write(&wire.Response{ID: req.ID, Op: wire.OpWatching, From: w.From})
	held := time.NewTicker(5 * time.Millisecond)
	defer held.Stop()
	for {
		for cc.out.Buffered() > maxWatchBacklog {
			select {
			case <-ctx.Done():
				return nil
			case <-held.C:
			}
		}
		select {
		case ev, ok := <-w.C:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				end := WatchEnded(w.Err())
				end.ID = req.ID
				return end
			}
			cc.write(&wire.Response{ID: req.ID, Op: wire.OpEvent, Event: WireEvent(ev)})
		case <-ctx.Done():
			return nil
		}
	}
}

// write queues resp on the connection.
func (cc *clientConn) write(resp *wire.Response) {
	cc.out.Write(func(b []byte) []byte { return wire.AppendResponse(b, resp) })
}

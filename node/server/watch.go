package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
)

// Watch starts a watch of the locks under prefix on this member
// (node.Node.Watch) for the identity who. The ACL must let who read
// prefix, the right a list of prefix needs; a refusal, or a prefix longer
// than a key, comes back as the answer the client port gives (a nil
// watch).
func (s *Server) Watch(ctx context.Context, who string, features uint64, prefix string) (*node.Watch, *wire.Response) {
	if a := s.auth.acl.Load(); a != nil && !a.Allows(who, RightRead, prefix) {
		return nil, s.refusal(who, features, 0, RightRead, fmt.Sprintf("watch %q", prefix), prefix)
	}
	if len(prefix) > wire.MaxKeyLen {
		return nil, &wire.Response{Op: wire.OpInvalidArgument, Reason: fmt.Sprintf("prefix must be at most %d bytes, got %d", wire.MaxKeyLen, len(prefix))}
	}
	w, err := s.node.Watch(ctx, prefix)
	if err != nil {
		resp := &wire.Response{}
		errorResponse(resp, err)
		return nil, resp
	}
	return w, nil
}

// WireEvent is ev as the client protocol and the HTTP API carry it.
func WireEvent(ev node.Event) wire.Event {
	return wire.Event{Key: ev.Key, Type: wire.EventType(ev.Type), Token: ev.Token, Owner: ev.Owner, LeaseMS: ev.LeaseMS, Index: ev.Index}
}

// WatchEnded is the answer that ends a watch cut off by err (Watch.Err):
// overloaded for a reader too slow (a limit of the member: its buffer),
// unavailable for a member that stopped or caught up by snapshot (watch
// again, here or elsewhere), error for anything else.
func WatchEnded(err error) *wire.Response {
	var slow *node.TooSlowError
	var snap *node.SnapshotError
	switch {
	case errors.As(err, &slow):
		return &wire.Response{Op: wire.OpOverloaded, Reason: err.Error()}
	case errors.As(err, &snap), errors.Is(err, node.ErrStopped):
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
	w, resp := cc.s.Watch(ctx, cc.who, features, req.Prefix)
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

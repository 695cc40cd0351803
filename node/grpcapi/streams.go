package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/server"
	raftlockv1 "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// maxBatch bounds the events one WatchResponse carries: those already
// waiting when one is sent, so a busy watch sends fewer, larger messages.
const maxBatch = 256

// stoppingError ends a stream when the member stops serving.
func stoppingError() error {
	return withError(codes.Unavailable, &raftlockv1.Error{Name: wire.ErrorNameUnavailable, Message: "this member is stopping; go on at another"})
}

// lost ends a keep-alive whose lock is lost (NOT_FOUND, name not-found).
func lost(key string, token uint64, why string) error {
	return withError(codes.NotFound, &raftlockv1.Error{Name: wire.ErrorNameNotFound, Message: fmt.Sprintf("lock %q lost (token %d): %s", key, token, why)})
}

// KeepAlive renews a held lock at once, then every third of its lease,
// answering each renewal, until the client closes its side (OK), or ends
// the stream the moment a renewal shows the lock lost (NOT_FOUND). A
// renewal answered unavailable, overloaded or outcome-unknown is tried
// again after a jittered backoff (20 ms doubling up to a third of the
// lease), until a whole lease passed since the
// last renewal that succeeded began (the cluster may have expired the
// lock by then: NOT_FOUND); a redirect ends the stream UNAVAILABLE naming
// the leader (the lock is not known lost: keep it alive there).
func (a *API) KeepAlive(stream grpc.BidiStreamingServer[raftlockv1.KeepAliveRequest, raftlockv1.KeepAliveResponse]) error {
	ctx := stream.Context()
	in, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid(errors.New("a keep-alive starts with a KeepAliveRequest"))
	}
	if err != nil {
		return err
	}
	if err := refused(in); err != nil {
		return invalid(err)
	}
	req, err := renewRequest(&raftlockv1.RenewRequest{Key: in.GetKey(), KeyBytes: in.GetKeyBytes(), Token: in.GetToken(), LeaseMs: in.GetLeaseMs()})
	if err == nil {
		err = wire.ValidateLeaseMS(in.GetLeaseMs())
	}
	if err != nil {
		return invalid(err)
	}
	// The identity's share first, then a place in the keep-alives' pool:
	// one identity's streams cannot fill the pool, and no stream takes a
	// place a unary call waits for.
	unit, err := a.b.Admit(identity(ctx), server.LimitCalls)
	if err != nil {
		a.countOverloaded("keepalive")
		return overloadedBy(err)
	}
	defer unit()
	release, err := a.take(a.streams, "keepalive", "keep-alive streams")
	if err != nil {
		return err
	}
	defer release()
	stop := make(chan error, 2)
	go func() {
		_, err := stream.Recv()
		switch {
		case errors.Is(err, io.EOF):
			err = nil // the client closed its side: done
		case err == nil:
			err = invalid(errors.New("a keep-alive takes one KeepAliveRequest; close the stream to stop it"))
		}
		stop <- err
	}()
	go func() {
		select {
		case <-a.stopping:
			stop <- stoppingError()
		case <-ctx.Done():
		}
	}()
	err = server.KeepAlive{
		Req:  req,
		Stop: stop,
		// Each renewal runs on the stream's unit (server.WithCallUnit).
		Renew: func(rctx context.Context, req *wire.Request) *wire.Response {
			return a.b.Do(callContext(server.WithCallUnit(rctx)), identity(ctx), wire.FeaturePermissionDenied, req)
		},
		Renewed: func() error {
			return stream.Send(&raftlockv1.KeepAliveResponse{Key: wire.AsText(req.Key), KeyBytes: keyBytes(req.Key), Token: req.Token, LeaseMs: req.LeaseMS})
		},
	}.Run(ctx)
	var end *server.KeepAliveEnd
	switch {
	case errors.As(err, &end) && end.Lost:
		return lost(req.Key, req.Token, end.Why)
	case errors.As(err, &end):
		return a.errorStatus(end.Answer, req)
	}
	return err
}

// Watch streams the lock events under a prefix: first a response with
// only the index the watch starts after, then the events, those waiting
// sent together, until the client cancels (its context ends), the member
// cuts the watch off (UNAVAILABLE, name overloaded or unavailable, or
// PERMISSION_DENIED once the ACL no longer lets the caller read the
// prefix, as server.WatchEnded says) or stops serving. Any member serves
// it.
func (a *API) Watch(in *raftlockv1.WatchRequest, stream grpc.ServerStreamingServer[raftlockv1.WatchResponse]) error {
	if err := refused(in); err != nil {
		return invalid(err)
	}
	// The member first (its ACL, the identity's share of watches, its own
	// bound), then this API's pool: a caller past its identity's share
	// is refused without taking a place others wait for.
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel() // ends the member's watch
	var after wire.Revision
	if in.GetAfterIndex() != 0 {
		after = wire.Revision{Index: in.GetAfterIndex(), Seq: in.GetAfterSeq()}
	}
	w, resp := a.b.Watch(ctx, identity(ctx), wire.FeaturePermissionDenied, in.GetPrefix(), after)
	if resp != nil {
		return a.errorStatus(resp, &wire.Request{Key: in.GetPrefix()})
	}
	release, err := a.take(a.watches, "watch", "watches")
	if err != nil {
		return err
	}
	defer release()
	if err := stream.Send(&raftlockv1.WatchResponse{FromIndex: w.From}); err != nil {
		return err
	}
	for {
		select {
		case ev, ok := <-w.C:
			if !ok {
				if err := stream.Context().Err(); err != nil {
					return err
				}
				end := server.WatchEnded(w.Err())
				return a.errorStatus(end, &wire.Request{Key: in.GetPrefix()})
			}
			out := &raftlockv1.WatchResponse{FromIndex: w.From, Events: []*raftlockv1.LockEvent{lockEvent(server.WireEvent(ev))}}
			for n := min(len(w.C), maxBatch-1); n > 0; n-- {
				if ev, ok = <-w.C; ok {
					out.Events = append(out.Events, lockEvent(server.WireEvent(ev)))
				}
			}
			// A client too slow to read blocks this send; meanwhile its
			// events fill the watch's buffer in the node, which cuts it
			// off: the member is never slowed.
			if err := stream.Send(out); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-a.stopping:
			return stoppingError()
		}
	}
}

// lockEvent is ev as the gRPC API carries it: its key and owner as text,
// which a protobuf string must be (a message that is not fails to send,
// ending the watch), and a key that is not UTF-8 in key_bytes too.
func lockEvent(ev wire.Event) *raftlockv1.LockEvent {
	return &raftlockv1.LockEvent{Key: wire.AsText(ev.Key), KeyBytes: keyBytes(ev.Key), Type: raftlockv1.EventType(ev.Type),
		Token: ev.Token, Owner: wire.AsText(ev.Owner), LeaseMs: ev.LeaseMS, Index: ev.Index, Seq: ev.Seq}
}

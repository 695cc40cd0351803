package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
)

// Forwarding: a follower relays a call of the HTTP/JSON or gRPC API to
// the leader and hands back its answer, as etcd's members do, so that a
// client that cannot follow a redirect (a stock gRPC stub, curl,
// Python's urllib) can use any member. The binary protocol's clients
// follow redirects themselves and are redirected, as API callers that
// ask for it are (the Go API client): one hop fewer.
//
// The follower vouches for the identity it verified from the caller's
// certificate: it sends the call to the leader's client port in an
// OpForward envelope, over a connection with its own member certificate,
// and the leader takes the envelope's identity from a member only
// (Do). The ACL and the identity's shares are then checked on the leader
// against the caller's identity, as for a call made there; the follower
// checks them too, before relaying.
//
// Outcome-unknown stays honest: a relayed call that may have reached the
// leader and got no answer (its connection broke, the caller left) is
// outcome-unknown for a call that changes state, never a retry-safe
// unavailable.

// forwardKey marks a context whose call Do forwards.
type forwardKey struct{}

// Forwarding marks ctx's call as one a follower relays to the leader
// instead of answering a redirect.
func Forwarding(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardKey{}, true)
}

func forwarding(ctx context.Context) bool { b, _ := ctx.Value(forwardKey{}).(bool); return b }

// SetRelay makes the server forward marked calls through r (nil: it
// redirects them, as before forwarding).
func (s *Server) SetRelay(r *client.Relay) {
	s.mu.Lock()
	s.relay = r
	s.mu.Unlock()
}

func (s *Server) relayer() *client.Relay {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.relay
}

// vouched returns the identity a request is made for: its sender's, or,
// for a request a member relays, the identity the member vouches for. A
// relayed request from anyone else is refused (ok false): only a
// member's certificate may speak for another identity. Without TLS
// nobody has an identity, so there is nothing to vouch for and none to
// forge.
func vouched(who string, req *wire.Request) (string, bool) {
	if !req.Forwarded {
		return who, true
	}
	if who != "" && !isMember(who) {
		return who, false
	}
	return req.Behalf, true
}

// forward relays req, answered redirect by this member, to the leader the
// redirect names, for the identity who. Its answer is the leader's, or,
// when the relay got none: unavailable (the call never left: retry), or
// outcome-unknown (it may have applied), or nil when the caller left.
func (s *Server) forward(ctx context.Context, relay *client.Relay, who string, req *wire.Request, redirect *wire.Response) *wire.Response {
	resp, err := relay.Forward(ctx, redirect.Leader, who, req)
	if err == nil {
		s.node.Metrics().Forwarded.WithLabelValues(opLabel(req.Op), resultLabel(resp.Op)).Inc()
		return &resp
	}
	if ctx.Err() != nil {
		return nil // the caller left; the relay cancelled the call
	}
	out := &wire.Response{ID: req.ID, Op: wire.OpUnavailable,
		Reason: fmt.Sprintf("forwarding to the leader, member %d at %s: %v", redirect.LeaderID, redirect.Leader, err)}
	if errors.Is(err, client.ErrOutcomeUnknown) && changesState(req) {
		out.Op = wire.OpOutcomeUnknown
	}
	s.node.Metrics().Forwarded.WithLabelValues(opLabel(req.Op), resultLabel(out.Op)).Inc()
	return out
}

// changesState says whether req may change the lock table or the
// configuration: its outcome is unknown when its answer is lost.
func changesState(req *wire.Request) bool {
	switch req.Op {
	case wire.OpGet, wire.OpList, wire.OpStatus:
		return false
	case wire.OpAdmin:
		return req.Key != wire.AdminMemberList
	}
	return true
}

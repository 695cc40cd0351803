package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/raftlock/raftlock/client/wire"
)

// A Relay is how a member forwards a call it cannot decide to the
// leader, for a client that cannot follow a redirect (a stock gRPC stub,
// curl): it sends the call in an OpForward envelope naming the client's
// identity, over connections of its own to the leaders it is sent to, and
// hands back the leader's answer as it came. It makes one attempt (and
// follows at most relayHops redirects, when leadership moved meanwhile):
// retrying is the caller's decision, which the answer lets it make.
type Relay struct {
	c *Client
}

// relayHops bounds the redirects one forwarded call follows.
const relayHops = 2

// ErrNotSent says a relayed call never left: safe to retry anywhere.
var ErrNotSent = errors.New("not sent")

// NewRelay returns a relay that dials with opts (a member's: its own
// certificate, which the leader requires of a forwarder).
func NewRelay(opts Options) *Relay {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Relay{c: &Client{opts: opts, conns: make(map[string]*conn)}}
}

// Forward sends req, a call of the client identity behalf, to the member
// at addr, and returns its answer under req's own id. A redirect is
// followed; the last one is returned when the hops run out. The error,
// when there is no answer, wraps ErrNotSent if the call never left (a
// dial that failed, a connection going away) and ErrOutcomeUnknown if it
// may have reached the member (its connection broke after it was sent, or
// ctx ended while it was in flight: then a cancel follows it).
func (r *Relay) Forward(ctx context.Context, addr string, behalf string, req *wire.Request) (wire.Response, error) {
	fwd := *req
	fwd.Forwarded, fwd.Behalf = true, behalf
	for hop := 0; ; hop++ {
		fwd.ID = r.c.nextID.Add(1)
		cn, err := r.c.conn(ctx, addr)
		if err != nil {
			return wire.Response{}, fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		resp, sent, err := cn.roundTrip(ctx, &fwd)
		switch {
		case err != nil && !sent:
			return wire.Response{}, fmt.Errorf("%w: %w", ErrNotSent, err)
		case err != nil:
			return wire.Response{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		case resp.Op == wire.OpRedirect && resp.Leader != "" && resp.Leader != addr && hop < relayHops:
			addr = resp.Leader
			continue
		}
		resp.ID = req.ID
		return resp, nil
	}
}

// Close closes the relay's connections.
func (r *Relay) Close() error { return r.c.Close() }

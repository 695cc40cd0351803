package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/ending"
)

// Event is one lock event of a watch: what the command applied at Index
// did to the lock on Key (granted, renewed, released, expired; a forced
// release is released).
type Event = wire.Event

// The event types.
const (
	EventGranted  = wire.EventGranted
	EventRenewed  = wire.EventRenewed
	EventReleased = wire.EventReleased
	EventExpired  = wire.EventExpired
)

// ErrWatchUnsupported says a member does not serve watches: it closed the
// connection at the watch request, as members from before watches do.
var ErrWatchUnsupported = errors.New("raftlock: the member does not serve watches")

// A Watch is a stream of lock events from one member. C carries the
// events in log order and is closed when the watch ends; Err then says
// why.
type Watch struct {
	C <-chan Event
	// From is the index the member had applied when the watch began: the
	// events are of the entries after it (a watch starts from now; it
	// replays nothing).
	From uint64
	// Member is the address of the member that serves the watch.
	Member string

	end *ending.Ending
}

// Err is why the watch ended, nil while C is open: ctx's error; an error
// wrapping ErrOverloaded when the member cut off a reader that fell too
// far behind (its message names the index); ErrUnavailable when the member
// stopped, caught up by snapshot, or the connection to it broke. Watch
// again to go on, comparing indexes to see what may have been missed.
func (w *Watch) Err() error { return w.end.Err() }

// Watch watches the locks whose keys start with prefix ("" for all of
// them) until ctx ends. Any member serves it, leader or not: every member
// applies the same entries and so reports the same events at the same
// indexes, across leader changes. It tries the endpoints in turn until
// one starts the watch, each on a connection of its own (so a member from
// before watches, which closes the connection at the request, leaves the
// client's other calls alone). A reader that falls behind is cut off by
// the member, never slowing it.
func (c *Client) Watch(ctx context.Context, prefix string) (*Watch, error) {
	if len(prefix) > wire.MaxKeyLen {
		return nil, &InvalidArgumentError{Reason: fmt.Sprintf("prefix must be at most %d bytes, got %d", wire.MaxKeyLen, len(prefix))}
	}
	var lastErr error
	target := c.target("")
	for range len(c.endpoints) + 1 {
		w, err := c.watchOn(ctx, target, prefix)
		if err == nil {
			return w, nil
		}
		var pe *ProtocolError
		if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.As(err, &pe) ||
			errors.Is(err, ErrPermissionDenied) || errors.As(err, new(*InvalidArgumentError)) {
			return nil, err
		}
		lastErr = err
		target = c.target(target)
	}
	return nil, fmt.Errorf("no member started the watch: %w", lastErr)
}

// watchOn starts a watch on the member at addr.
func (c *Client) watchOn(ctx context.Context, addr, prefix string) (*Watch, error) {
	cn, err := c.dial(ctx, addr, wire.FeaturePermissionDenied|wire.FeatureWatch)
	if err != nil {
		return nil, err
	}
	answers := make(chan wire.Response, 64)
	if err := cn.stream(&wire.Request{ID: c.nextID.Add(1), Op: wire.OpWatch, Prefix: prefix}, answers); err != nil {
		cn.close(err)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var first wire.Response
	select {
	case first = <-answers:
	case <-cn.done:
		return nil, fmt.Errorf("%w at %s (it closed the connection: %w)", ErrWatchUnsupported, addr, cn.failure())
	case <-ctx.Done():
		cn.close(ctx.Err())
		return nil, ctx.Err()
	}
	if first.Op != wire.OpWatching {
		cn.close(errWatchEnded)
		return nil, answerError(first)
	}
	events := make(chan Event)
	w := &Watch{C: events, From: first.From, Member: addr, end: ending.New()}
	go func() {
		err := w.pump(ctx, cn, answers, events)
		cn.close(errWatchEnded)
		w.end.End(err) // before events: a reader that sees them end finds Err set
		close(events)
	}()
	return w, nil
}

var errWatchEnded = errors.New("watch ended")

// pump hands the member's events to the reader until the watch ends, and
// returns why it did.
func (w *Watch) pump(ctx context.Context, cn *conn, answers <-chan wire.Response, events chan<- Event) error {
	for {
		select {
		case resp := <-answers:
			if resp.Op != wire.OpEvent {
				return answerError(resp)
			}
			select {
			case events <- resp.Event:
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-cn.done:
			return fmt.Errorf("%w: connection to %s lost: %w", ErrUnavailable, cn.addr, cn.failure())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

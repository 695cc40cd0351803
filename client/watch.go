package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/ending"
	"github.com/raftlock/raftlock/internal/retry"
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

// A Watch is a stream of lock events. C carries the events in log order,
// each once, and is closed when the watch ends; Err then says why. When
// its member stops or the connection to it breaks, the watch resumes by
// itself at another member, after the last event it delivered.
type Watch struct {
	C <-chan Event
	// From is the index the first member had applied when the watch
	// began: without a revision to resume after, its events are of the
	// entries after it.
	From uint64
	// Member is the address of the member that served the watch first.
	Member string

	end *ending.Ending
}

// Err is why the watch ended, nil while C is open: ctx's error;
// ErrCompacted when no member still held the events after the last one
// delivered (list again: a reader that keeps falling behind ends so);
// ErrUnavailable when no member took the watch back within 10 s.
func (w *Watch) Err() error { return w.end.Err() }

// Watch watches the locks whose keys start with prefix ("" for all of
// them) from now until ctx ends (WatchAfter with the zero revision).
func (c *Client) Watch(ctx context.Context, prefix string) (*Watch, error) {
	return c.WatchAfter(ctx, prefix, wire.Revision{})
}

// WatchAfter watches the locks whose keys start with prefix until ctx
// ends: first every event after revision after (an Event's Revision;
// zero: none, from now), replayed from the member's event history, then
// the events as they apply. Any member serves it, leader or not: every
// member applies the same entries and so reports the same events at the
// same revisions. It tries the endpoints in turn until one starts the
// watch, each on a connection of its own (so a member from before
// watches, which closes the connection at the request, leaves the
// client's other calls alone); ErrCompacted when none still holds the
// events after after. A reader that falls behind is cut off by the
// member, never slowing it.
func (c *Client) WatchAfter(ctx context.Context, prefix string, after wire.Revision) (*Watch, error) {
	if len(prefix) > wire.MaxKeyLen {
		return nil, &InvalidArgumentError{Reason: fmt.Sprintf("prefix must be at most %d bytes, got %d", wire.MaxKeyLen, len(prefix))}
	}
	st, err := c.startWatch(ctx, prefix, after, "")
	if err != nil {
		return nil, err
	}
	events := make(chan Event)
	w := &Watch{C: events, From: st.from, Member: st.addr, end: ending.New()}
	if after == (wire.Revision{}) {
		after = wire.Revision{Index: st.from, Seq: math.MaxUint32} // after every event of what it had applied
	}
	go func() {
		err := w.run(ctx, c, st, prefix, after, events)
		w.end.End(err) // before events: a reader that sees them end finds Err set
		close(events)
	}()
	return w, nil
}

// watchStream is one member's stream of a watch.
type watchStream struct {
	cn      *conn
	answers chan wire.Response
	from    uint64
	addr    string
}

// startWatch starts the watch on the first member that takes it, trying
// the endpoints in turn from the one after failed ("": the first).
func (c *Client) startWatch(ctx context.Context, prefix string, after wire.Revision, failed string) (*watchStream, error) {
	var lastErr error
	target := c.target(failed)
	compacted := 0
	for range len(c.endpoints) + 1 {
		st, err := c.watchOn(ctx, target, prefix, after)
		if err == nil {
			return st, nil
		}
		var pe *ProtocolError
		if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.As(err, &pe) ||
			errors.Is(err, ErrPermissionDenied) || errors.As(err, new(*InvalidArgumentError)) {
			return nil, err
		}
		if errors.Is(err, ErrCompacted) {
			// Another member may hold more of the history.
			if compacted++; compacted >= len(c.endpoints) {
				return nil, err
			}
		}
		lastErr = err
		target = c.target(target)
	}
	return nil, fmt.Errorf("no member started the watch: %w", lastErr)
}

// watchOn starts a watch on the member at addr.
func (c *Client) watchOn(ctx context.Context, addr, prefix string, after wire.Revision) (*watchStream, error) {
	cn, err := c.dial(ctx, addr, wire.FeaturePermissionDenied|wire.FeatureWatch)
	if err != nil {
		return nil, err
	}
	answers := make(chan wire.Response, 64)
	if err := cn.stream(&wire.Request{ID: c.nextID.Add(1), Op: wire.OpWatch, Prefix: prefix, WatchAfter: after}, answers); err != nil {
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
	return &watchStream{cn: cn, answers: answers, from: first.From, addr: addr}, nil
}

var errWatchEnded = errors.New("watch ended")

// watchResumeFor bounds how long a watch tries to resume when no member
// takes it back (every member down, or none reachable): it then ends
// ErrUnavailable rather than wait in silence.
const watchResumeFor = 10 * time.Second

// run hands the events of st, then of the streams that resume it, to the
// reader until the watch ends, and returns why it did. after is the last
// revision delivered (or skipped as before the watch).
func (w *Watch) run(ctx context.Context, c *Client, st *watchStream, prefix string, after wire.Revision, events chan<- Event) error {
	var backoff retry.Backoff
	for {
		err := st.pump(ctx, &after, events)
		st.cn.close(errWatchEnded)
		if ctx.Err() != nil || !(errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOverloaded) || errors.Is(err, ErrCompacted)) {
			return err
		}
		// The member stopped, the connection to it broke, it cut off a
		// reader that fell behind, or it caught up by snapshot past the
		// watch: resume after the last event delivered, at the next
		// member that still holds what followed it, for up to
		// watchResumeFor.
		giveUp := time.Now().Add(watchResumeFor)
		for {
			backoff.Wait(ctx)
			if ctx.Err() != nil {
				return fmt.Errorf("%w (resuming the watch: %w)", err, ctx.Err())
			}
			if time.Now().After(giveUp) {
				return fmt.Errorf("%w (no member took the watch back within %v)", err, watchResumeFor)
			}
			next, serr := c.startWatch(ctx, prefix, after, st.addr)
			if serr == nil {
				st = next
				break
			}
			if errors.Is(serr, ErrCompacted) || ctx.Err() != nil || !(errors.Is(serr, ErrUnavailable) || errors.Is(serr, ErrNoMember) || isDialError(serr)) {
				return serr
			}
		}
	}
}

// isDialError says whether err is a failure to reach a member, which a
// resume retries.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || strings.Contains(err.Error(), "no member started the watch")
}

// pump hands the member's events to the reader until the stream ends,
// advancing *after past each one delivered, and returns why it ended.
func (st *watchStream) pump(ctx context.Context, after *wire.Revision, events chan<- Event) error {
	for {
		select {
		case resp := <-st.answers:
			if resp.Op != wire.OpEvent {
				return answerError(resp)
			}
			if !after.Before(resp.Event.Revision()) {
				continue // delivered already
			}
			select {
			case events <- resp.Event:
				*after = resp.Event.Revision()
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-st.cn.done:
			return fmt.Errorf("%w: connection to %s lost: %w", ErrUnavailable, st.addr, st.cn.failure())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

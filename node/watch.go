package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/raftlock/raftlock/internal/ending"
	"github.com/raftlock/raftlock/member"
)

// Event is one lock event: a change the command applied at its index made
// (member.Event).
type Event = member.Event

// The event types (member.EventType).
const (
	EventGranted  = member.EventGranted
	EventRenewed  = member.EventRenewed
	EventReleased = member.EventReleased
	EventExpired  = member.EventExpired
)

// DefaultWatchBuffer is Config.WatchBuffer's default: how many events a
// watcher may leave unread before it is cut off (TooSlowError), so that
// the member's loop never waits for a watcher.
const DefaultWatchBuffer = 1024

// TooSlowError ends a watch whose reader fell Unread events behind.
type TooSlowError struct {
	Index  uint64 // the index of the first event it did not get
	Unread int    // the events it had not read (its buffer)
}

func (e *TooSlowError) Error() string {
	return fmt.Sprintf("watcher too slow: %d events unread, cut off at index %d", e.Unread, e.Index)
}

// SnapshotError ends a watch on a member that caught up by installing a
// snapshot: the changes it covers were never applied here one by one, so
// the watch cannot say what they were.
type SnapshotError struct {
	Index uint64 // the snapshot's index
}

func (e *SnapshotError) Error() string {
	return fmt.Sprintf("member caught up by a snapshot at index %d: the events before it are not known here; watch again", e.Index)
}

// A Watch is a stream of the lock events under one key prefix, from the
// entries a member applies after the watch started ("now": From is the
// index it had applied then; there is no replay of older entries). C is
// closed when the watch ends, Err then says why.
type Watch struct {
	C    <-chan Event
	From uint64

	c      chan Event
	prefix string
	end    *ending.Ending // ended before c is closed
}

// Err is why the watch ended: nil before C is closed; ctx's error when its
// context ended; a *TooSlowError, *SnapshotError, ErrStopped, or the error
// EndWatch was given otherwise.
func (w *Watch) Err() error { return w.end.Err() }

// Done is closed when the watch ends (C is closed right after).
func (w *Watch) Done() <-chan struct{} { return w.end.Done() }

// EndWatch ends w with err (its caller may no longer watch, say), unless
// it ended already.
func (n *Node) EndWatch(w *Watch, err error) { n.watchers.end(w, err) }

// Watch starts a watch of the locks whose key begins with prefix ("" for
// all of them), on this member: every member reports the same events for
// the same indexes, leader or not. It lasts until ctx ends, the member
// stops, or the reader falls behind.
func (n *Node) Watch(ctx context.Context, prefix string) (*Watch, error) {
	c := make(chan Event, n.cfg.WatchBuffer)
	w := &Watch{C: c, c: c, prefix: prefix, end: ending.New()}
	err := n.inspectContext(ctx, func(core *member.Core) {
		w.From = core.Applied()
		core.SetWatching(true)
		n.watchers.add(w)
	})
	if errors.Is(err, errLoopEnded) {
		return nil, ErrStopped
	}
	if err != nil {
		return nil, fmt.Errorf("start watch: %w", err)
	}
	go func() {
		select {
		case <-ctx.Done():
			n.watchers.end(w, ctx.Err())
		case <-w.end.Done():
		}
	}()
	return w, nil
}

// watchers are a node's watches. The loop publishes to them under mu
// without ever blocking; count lets it turn the core's events off when
// nobody watches. They are indexed by prefix, and the prefixes by length,
// so that an event costs one lookup per distinct prefix length and one
// send per matching watch, not a test of every watch: thousands of
// watches on other prefixes must not slow the loop down.
type watchers struct {
	mu       sync.Mutex
	set      map[*Watch]struct{}
	byPrefix map[string]map[*Watch]struct{}
	lengths  map[int]int // distinct prefixes by length
	count    atomic.Int64
}

func (h *watchers) add(w *Watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.set == nil {
		h.set, h.byPrefix, h.lengths = map[*Watch]struct{}{}, map[string]map[*Watch]struct{}{}, map[int]int{}
	}
	h.set[w] = struct{}{}
	same := h.byPrefix[w.prefix]
	if same == nil {
		same = map[*Watch]struct{}{}
		h.byPrefix[w.prefix] = same
		h.lengths[len(w.prefix)]++
	}
	same[w] = struct{}{}
	h.count.Add(1)
}

// active says whether anybody watches.
func (h *watchers) active() bool { return h.count.Load() > 0 }

// end ends w with err, unless it ended already.
func (h *watchers) end(w *Watch, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endLocked(w, err)
}

func (h *watchers) endLocked(w *Watch, err error) {
	if _, ok := h.set[w]; !ok {
		return
	}
	delete(h.set, w)
	same := h.byPrefix[w.prefix]
	delete(same, w)
	if len(same) == 0 {
		delete(h.byPrefix, w.prefix)
		if h.lengths[len(w.prefix)]--; h.lengths[len(w.prefix)] == 0 {
			delete(h.lengths, len(w.prefix))
		}
	}
	h.count.Add(-1)
	w.end.End(err) // before c: a reader that sees c closed finds Err set
	close(w.c)
}

// endAll ends every watch with err (the member stops).
func (h *watchers) endAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.set {
		h.endLocked(w, err)
	}
}

// publish hands events, in log order, to every watch whose prefix they
// match, cutting off a watch whose buffer is full rather than waiting.
// Each watch has one prefix, so it meets each event at most once, and in
// the events' order.
func (h *watchers) publish(events []Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range events {
		if ev.Type == member.EventSnapshot {
			for w := range h.set {
				if ev.Index > w.From {
					h.endLocked(w, &SnapshotError{Index: ev.Index})
				}
			}
			continue
		}
		for l := range h.lengths {
			if l > len(ev.Key) {
				continue
			}
			for w := range h.byPrefix[ev.Key[:l]] {
				h.send(w, ev)
			}
		}
	}
}

// send hands ev to w, or cuts w off when its buffer is full.
func (h *watchers) send(w *Watch, ev Event) {
	if ev.Index <= w.From {
		return // applied before the watch started
	}
	select {
	case w.c <- ev:
	default:
		h.endLocked(w, &TooSlowError{Index: ev.Index, Unread: len(w.c)})
	}
}

// Publish implements member.Publisher: the loop's events go to the
// watches.
func (l *loop) Publish(events []member.Event) { l.n.watchers.publish(events) }

package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/raftlock/raftlock/client/wire"
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

// A Revision names a lock event (wire.Revision): the index of the entry
// whose command made it and its place among that entry's events. Every
// member numbers the same events alike, so a watch may resume after a
// revision at any member. The zero Revision is before every event.
type Revision = wire.Revision

// RevisionOf is ev's revision.
func RevisionOf(ev Event) Revision { return Revision{Index: ev.Index, Seq: ev.Seq} }

// endOf is the last revision an entry at index can have: a watch from
// "after index" skips every event of that index.
func endOf(index uint64) Revision { return Revision{Index: index, Seq: math.MaxUint32} }

// DefaultWatchHistory is Config.WatchHistory's default: how many recent
// lock events a member keeps for watches that resume.
const DefaultWatchHistory = 10000

// CompactedError refuses a watch that resumes after a revision whose
// following events this member no longer holds (its event history is
// bounded, starts when the member does, and starts again when it installs
// a snapshot, whose changes it never applied one by one), and ends a
// watch whose member caught up by snapshot past it. Held says after which
// revision the member holds every event: list again, then watch from now
// or after Held.
type CompactedError struct {
	After Revision // what the watch asked for, or had reached
	Held  Revision
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("the events after revision %s are no longer held here (this member holds those after %s); list the locks again and watch from there", e.After, e.Held)
}

// A Watch is a stream of the lock events under one key prefix: those
// after a revision, replayed from the member's event history, then those
// of the entries it applies ("now": From is the index it had applied when
// the watch started). C is closed when the watch ends, Err then says why.
type Watch struct {
	C    <-chan Event
	From uint64

	c      chan Event
	prefix string
	after  Revision       // the last revision it skips
	end    *ending.Ending // ended before c is closed
}

// Err is why the watch ended: nil before C is closed; ctx's error when its
// context ended; a *TooSlowError, *CompactedError (the member caught up
// by snapshot past it), ErrStopped, or the error EndWatch was given
// otherwise.
func (w *Watch) Err() error { return w.end.Err() }

// Done is closed when the watch ends (C is closed right after).
func (w *Watch) Done() <-chan struct{} { return w.end.Done() }

// EndWatch ends w with err (its caller may no longer watch, say), unless
// it ended already.
func (n *Node) EndWatch(w *Watch, err error) { n.watchers.end(w, err) }

// Watch starts a watch of the locks whose key begins with prefix ("" for
// all of them), on this member: every member reports the same events at
// the same revisions, leader or not. after zero starts it from now;
// otherwise it first replays, from the member's event history, every
// event after that revision, exactly once and in order, or is refused
// with a *CompactedError when the history no longer reaches back to it.
// It lasts until ctx ends, the member stops, or the reader falls behind.
func (n *Node) Watch(ctx context.Context, prefix string, after Revision) (*Watch, error) {
	w := &Watch{prefix: prefix, end: ending.New()}
	var refused error
	err := n.inspectContext(ctx, func(core *member.Core) {
		w.From = core.Applied()
		core.SetWatching(true)
		refused = n.watchers.start(w, after, core.Applied(), n.cfg.WatchBuffer)
	})
	if errors.Is(err, errLoopEnded) {
		return nil, ErrStopped
	}
	if err != nil {
		return nil, fmt.Errorf("start watch: %w", err)
	}
	if refused != nil {
		return nil, refused
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
	history  history
}

// history is a member's recent lock events, for watches that resume: a
// ring of at most its capacity, and held, after which revision it holds
// every event (the start's applied index, then each snapshot installed or
// event dropped for room).
type history struct {
	ring  []Event
	first int // index in ring of the oldest
	n     int
	held  Revision
}

// keep adds ev, dropping the oldest when full.
func (h *history) keep(ev Event) {
	if len(h.ring) == 0 {
		h.held = RevisionOf(ev)
		return
	}
	if h.n == len(h.ring) {
		h.held = RevisionOf(h.ring[h.first])
		h.first = (h.first + 1) % len(h.ring)
		h.n--
	}
	h.ring[(h.first+h.n)%len(h.ring)] = ev
	h.n++
}

// reset forgets every event: the member holds none before after.
func (h *history) reset(after Revision) { h.first, h.n, h.held = 0, 0, after }

// since are the events after r, oldest first.
func (h *history) since(r Revision) []Event {
	var out []Event
	for i := range h.n {
		if ev := h.ring[(h.first+i)%len(h.ring)]; r.Before(RevisionOf(ev)) {
			out = append(out, ev)
		}
	}
	return out
}

// start registers w after replaying what it missed since after into its
// channel (sized to hold the replay and buffer more), or refuses it when
// the history does not reach back to after. applied is what the member
// has applied: a zero after starts from it. Under the loop: no event is
// published meanwhile.
func (h *watchers) start(w *Watch, after Revision, applied uint64, buffer int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var replay []Event
	if after == (Revision{}) {
		after = endOf(applied)
	} else {
		if after.Before(h.history.held) {
			return &CompactedError{After: after, Held: h.history.held}
		}
		for _, ev := range h.history.since(after) {
			if strings.HasPrefix(ev.Key, w.prefix) {
				replay = append(replay, ev)
			}
		}
	}
	w.after = after
	w.c = make(chan Event, buffer+len(replay))
	w.C = w.c
	for _, ev := range replay {
		w.c <- ev
		w.after = RevisionOf(ev)
	}
	h.addLocked(w)
	return nil
}

func (h *watchers) addLocked(w *Watch) {
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

// active says whether lock events are wanted: somebody watches, or the
// member keeps a history for watches that resume.
func (h *watchers) active() bool { return h.count.Load() > 0 || len(h.history.ring) > 0 }

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
			// The changes the snapshot covers were never applied here one
			// by one: what they were is not known here any more.
			held := endOf(ev.Index)
			for w := range h.set {
				if w.after.Before(held) {
					h.endLocked(w, &CompactedError{After: w.after, Held: held})
				}
			}
			h.history.reset(held)
			continue
		}
		h.history.keep(ev)
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
	if !w.after.Before(RevisionOf(ev)) {
		return // applied before the watch started, or replayed
	}
	select {
	case w.c <- ev:
		w.after = RevisionOf(ev)
	default:
		h.endLocked(w, &TooSlowError{Index: ev.Index, Unread: len(w.c)})
	}
}

// Publish implements member.Publisher: the loop's events go to the
// watches.
func (l *loop) Publish(events []member.Event) { l.n.watchers.publish(events) }

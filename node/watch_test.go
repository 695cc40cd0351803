package node_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
)

// collect reads n events from w, failing t if they do not come in time or
// the watch ends first.
func collect(t *testing.T, w *node.Watch, n int) []node.Event {
	t.Helper()
	return nodetest.Receive(t, w.C, n, w.Err)
}

// TestEveryMemberWatchesTheSameEvents: the events come from applied
// entries, so a watch on each member sees the same sequence at the same
// indexes, and only the keys under its prefix.
func TestEveryMemberWatchesTheSameEvents(t *testing.T) {
	c, l, ctx := leading(t, 3, 60*time.Second)
	var watches []*node.Watch
	for _, n := range c.Nodes() {
		w, err := n.Watch(ctx, "w/", node.Revision{})
		if err != nil {
			t.Fatalf("watch member %d: %v", n.ID(), err)
		}
		watches = append(watches, w)
	}
	tok, err := l.AcquireAs(ctx, "w/a", "alice", time.Minute, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "other", time.Minute, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, "w/a", tok, 2*time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "w/a", tok, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "w/b", time.Minute, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ForceRelease(ctx, "w/b", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "w/c", 50*time.Millisecond, 0, 0); err != nil {
		t.Fatal(err)
	}
	want := "granted w/a alice 60000,renewed w/a alice 120000,released w/a alice 120000," +
		"granted w/b  60000,released w/b  60000,granted w/c  50,expired w/c  50"
	var first []node.Event
	for i, w := range watches {
		got := collect(t, w, 7)
		var s []string
		for _, ev := range got {
			s = append(s, fmt.Sprintf("%s %s %s %d", ev.Type, ev.Key, ev.Owner, ev.LeaseMS))
		}
		if strings.Join(s, ",") != want {
			t.Fatalf("member %d's events: %q, want %q", c.Nodes()[i].ID(), s, want)
		}
		if i == 0 {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("members' events differ:\n%+v\n%+v", got, first)
		}
	}
}

// TestSlowWatcherIsCutOff: a watch nobody reads is cut off with the index
// it stopped at once its buffer is full, and the member goes on serving
// (and feeding a watch that reads) meanwhile.
func TestSlowWatcherIsCutOff(t *testing.T) {
	c := nodetest.New(t, 3, func(cfg *node.Config) { cfg.WatchBuffer = 4 })
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 60*time.Second)
	slow, err := l.Watch(ctx, "", node.Revision{})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := l.Watch(ctx, "", node.Revision{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []node.Event, 1)
	go func() {
		var evs []node.Event
		for ev := range fast.C {
			if evs = append(evs, ev); len(evs) == 10 {
				break
			}
		}
		got <- evs
	}()
	for i := range 10 {
		if _, err := l.Acquire(ctx, fmt.Sprintf("k%d", i), time.Minute, 0, 0); err != nil {
			t.Fatalf("acquire %d while a watcher lags: %v", i, err)
		}
	}
	if evs := <-got; len(evs) != 10 {
		t.Fatalf("the reading watch got %d events, want 10", len(evs))
	}
	var tooSlow *node.TooSlowError
	if err := slow.Err(); !errors.As(err, &tooSlow) || tooSlow.Index <= slow.From || tooSlow.Unread != 4 {
		t.Fatalf("the lagging watch ended with %v, want a TooSlowError after index %d", err, slow.From)
	}
	if n := len(drain(slow)); n != 4 {
		t.Fatalf("the cut-off watch kept %d events, want its 4", n)
	}
}

func drain(w *node.Watch) []node.Event {
	var evs []node.Event
	for ev := range w.C {
		evs = append(evs, ev)
	}
	return evs
}

// TestWatchEndsWithItsContextAndTheMember: a watch ends with its
// context's error, and with ErrStopped when its member stops.
func TestWatchEndsWithItsContextAndTheMember(t *testing.T) {
	c, l, ctx := leading(t, 1, 30*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	w, err := l.Watch(wctx, "", node.Revision{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	drain(w)
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("watch ended with %v, want its context's", w.Err())
	}
	w, err = l.Watch(ctx, "", node.Revision{})
	if err != nil {
		t.Fatal(err)
	}
	c.StopMember(l.ID())
	drain(w)
	if !errors.Is(w.Err(), node.ErrStopped) {
		t.Fatalf("watch ended with %v, want ErrStopped", w.Err())
	}
	if _, err := l.Watch(ctx, "", node.Revision{}); !errors.Is(err, node.ErrStopped) {
		t.Fatalf("watch on a stopped member: %v, want ErrStopped", err)
	}
}

// TestWatchResumesAfterARevision: a watch that resumes after a revision,
// at any member, gets every event after it exactly once and in order,
// then the new ones; one that resumes before what the member's bounded
// history holds is refused as compacted, naming what it holds.
func TestWatchResumesAfterARevision(t *testing.T) {
	c := nodetest.New(t, 3, func(cfg *node.Config) { cfg.WatchHistory = 8 })
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 60*time.Second)
	first, err := l.Watch(ctx, "r/", node.Revision{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := l.Acquire(ctx, fmt.Sprintf("r/%d", i), time.Minute, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	seen := collect(t, first, 3)
	after := node.RevisionOf(seen[0])
	for i := 3; i < 5; i++ {
		if _, err := l.Acquire(ctx, fmt.Sprintf("r/%d", i), time.Minute, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	seen = append(seen, collect(t, first, 2)...)
	for _, n := range c.Nodes() {
		nodetest.WaitFor(t, 10*time.Second, "the member to apply every grant", func() bool {
			w, err := n.Watch(ctx, "r/", node.RevisionOf(seen[4]))
			if err != nil {
				return false
			}
			defer n.EndWatch(w, nil)
			return true
		})
		w, err := n.Watch(ctx, "r/", after)
		if err != nil {
			t.Fatalf("member %d: resume after %s: %v", n.ID(), after, err)
		}
		got := collect(t, w, 4)
		for i, ev := range got {
			if node.RevisionOf(ev) != node.RevisionOf(seen[i+1]) || ev.Key != seen[i+1].Key {
				t.Fatalf("member %d: resumed event %d is %s %s, want %s %s", n.ID(), i, node.RevisionOf(ev), ev.Key, node.RevisionOf(seen[i+1]), seen[i+1].Key)
			}
		}
		select {
		case ev := <-w.C:
			t.Fatalf("member %d: an event more than it missed: %+v", n.ID(), ev)
		case <-time.After(50 * time.Millisecond):
		}
		n.EndWatch(w, nil)
	}
	// Past the history of 8 events: the first grant's is gone.
	for i := 5; i < 15; i++ {
		if _, err := l.Acquire(ctx, fmt.Sprintf("r/%d", i), time.Minute, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	collect(t, first, 10)
	var compacted *node.CompactedError
	if _, err := l.Watch(ctx, "r/", after); !errors.As(err, &compacted) || !after.Before(compacted.Held) {
		t.Errorf("resume after %s past the history: %v, want a CompactedError", after, err)
	}
}

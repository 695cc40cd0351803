package node

import (
	"fmt"
	"slices"
	"testing"

	"github.com/raftlock/raftlock/internal/ending"
	"github.com/raftlock/raftlock/member"
)

func newTestWatch(prefix string, from uint64, buffer int) *Watch {
	c := make(chan Event, buffer)
	return &Watch{C: c, c: c, prefix: prefix, From: from, after: endOf(from), end: ending.New()}
}

func keysOf(w *Watch) []string {
	var keys []string
	for len(w.c) > 0 {
		keys = append(keys, (<-w.c).Key)
	}
	return keys
}

// The prefix index delivers to each watch exactly the events under its
// prefix, in order, whatever other prefixes share its length or extend it,
// and never an event applied before the watch started.
func TestWatchIndexDeliversEachMatchOnce(t *testing.T) {
	var h watchers
	ws := map[string]*Watch{}
	for _, p := range []string{"", "a", "a/", "a/b", "b/", "zz/long/prefix"} {
		ws[p] = newTestWatch(p, 0, 64)
		h.addLocked(ws[p])
	}
	late := newTestWatch("a/", 3, 64)
	h.addLocked(late)
	var events []Event
	for i, k := range []string{"a/b/c", "a/x", "b/", "ab", "c", "a/b"} {
		events = append(events, Event{Key: k, Index: uint64(i + 1), Type: member.EventGranted})
	}
	h.publish(events)
	want := map[string][]string{
		"":               {"a/b/c", "a/x", "b/", "ab", "c", "a/b"},
		"a":              {"a/b/c", "a/x", "ab", "a/b"},
		"a/":             {"a/b/c", "a/x", "a/b"},
		"a/b":            {"a/b/c", "a/b"},
		"b/":             {"b/"},
		"zz/long/prefix": nil,
	}
	for p, keys := range want {
		if got := keysOf(ws[p]); !slices.Equal(got, keys) {
			t.Errorf("watch of %q got %q, want %q", p, got, keys)
		}
	}
	if got := keysOf(late); !slices.Equal(got, []string{"a/b"}) {
		t.Errorf("watch of a/ from index 3 got %q, want [a/b]", got)
	}
}

// A full watch is cut off without disturbing the others of its prefix, and
// the index forgets an ended watch's prefix.
func TestWatchIndexCutsOffAFullWatch(t *testing.T) {
	var h watchers
	small, big := newTestWatch("k/", 0, 1), newTestWatch("k/", 0, 8)
	h.addLocked(small)
	h.addLocked(big)
	h.publish([]Event{{Key: "k/1", Index: 1}, {Key: "k/2", Index: 2}})
	if _, ok := small.Err().(*TooSlowError); !ok {
		t.Fatalf("the full watch ended with %v, want TooSlowError", small.Err())
	}
	if got := keysOf(big); !slices.Equal(got, []string{"k/1", "k/2"}) {
		t.Fatalf("the other watch of k/ got %q", got)
	}
	h.end(big, nil)
	if len(h.byPrefix) != 0 || len(h.lengths) != 0 || h.count.Load() != 0 {
		t.Fatalf("ended watches left %d prefixes, %d lengths, count %d", len(h.byPrefix), len(h.lengths), h.count.Load())
	}
}

// BenchmarkPublishBesideOtherWatches: what one event costs the member's
// loop with 0 or 8,192 watches on other prefixes (issue 37: 32,768 watches
// of one identity slowed everyone's commands 9x when every event tested
// every watch).
func BenchmarkPublishBesideOtherWatches(b *testing.B) {
	for _, others := range []int{0, 8192} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			var h watchers
			for i := range others {
				h.addLocked(newTestWatch(fmt.Sprintf("tenant-%d/", i), 0, 1))
			}
			mine := newTestWatch("jobs/", 0, 1<<20)
			h.addLocked(mine)
			ev := []Event{{Key: "jobs/42", Index: 1, Type: member.EventGranted}}
			b.ResetTimer()
			for i := range b.N {
				ev[0].Index = uint64(i + 1)
				h.publish(ev)
				if len(mine.c) == cap(mine.c) {
					b.StopTimer()
					keysOf(mine)
					b.StartTimer()
				}
			}
		})
	}
}

package fsm

import (
	"fmt"
	"testing"
)

// Keys of one hash are chained: each is found apart from the others, and
// a key not recorded is not found under their hash.
func TestChangesKeepKeysOfOneHashApart(t *testing.T) {
	c := &Changes{}
	c.find("") // makes the index
	const h = 7
	for i, k := range []string{"a", "b", "", "c"} {
		c.add(k, h, change{before: i%2 == 0, now: i%2 == 1})
	}
	for i, k := range []string{"a", "b", "", "c"} {
		j := c.lookup(k, h)
		if j < 0 || c.key(j) != k || c.list[j].before != (i%2 == 0) || c.list[j].now != (i%2 == 1) {
			t.Errorf("key %q: entry %d", k, j)
		}
	}
	if j := c.lookup("d", h); j >= 0 {
		t.Errorf("unrecorded key found at %d (%q)", j, c.key(j))
	}
	if c.Len() != 4 || c.EncodedSize() != 3+4*lockOverhead {
		t.Errorf("Len %d, EncodedSize %d", c.Len(), c.EncodedSize())
	}
}

// A key's changes keep what the table held at the first and after the
// last; absorbing earlier changes keeps the earliest point's holding and
// the latest change's, key by key.
func TestChangesNoteAndAbsorb(t *testing.T) {
	earlier, later := &Changes{}, &Changes{}
	for i := range 100 {
		k := fmt.Sprintf("k%03d", i)
		earlier.note(k, i%2 == 0, true) // held before: even keys
		earlier.note(k, true, i%3 == 0) // held after: multiples of 3
	}
	for i := 50; i < 150; i++ {
		later.note(fmt.Sprintf("k%03d", i), i < 100 && i%3 == 0, i%5 == 0)
	}
	later.Absorb(earlier)
	if later.Len() != 150 || earlier.Len() != 0 {
		t.Fatalf("after Absorb: %d keys (want 150), earlier %d (want 0)", later.Len(), earlier.Len())
	}
	for i := range 150 {
		k := fmt.Sprintf("k%03d", i)
		j, _ := later.find(k)
		if j < 0 {
			t.Fatalf("%s lost", k)
		}
		want := change{before: i < 100 && i%2 == 0, now: i%3 == 0}
		if i >= 100 {
			want.before = false
		}
		if i >= 50 {
			want.now = i%5 == 0
		}
		if got := later.list[j].change; got != want {
			t.Errorf("%s: %+v, want %+v", k, got, want)
		}
	}
}

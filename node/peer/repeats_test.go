package peer

import (
	"fmt"
	"testing"
	"time"
)

// A reason repeated within the window is logged once; the next line after
// the window says how many were held back. Distinct reasons are each
// logged, and the remembered reasons stay bounded.
func TestRepeatedRefusalsAreLoggedOncePerWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRepeats(30*time.Second, func() time.Time { return now })
	if ok, held := r.log("incarnation mismatch"); !ok || held != 0 {
		t.Fatalf("first: %v %d", ok, held)
	}
	for i := range 49 {
		now = now.Add(50 * time.Millisecond)
		if ok, _ := r.log("incarnation mismatch"); ok {
			t.Fatalf("repeat %d within the window was logged", i)
		}
	}
	if ok, _ := r.log("another cluster"); !ok {
		t.Fatal("a new reason was held back")
	}
	now = now.Add(30 * time.Second)
	if ok, held := r.log("incarnation mismatch"); !ok || held != 49 {
		t.Fatalf("after the window: %v, held %d; want logged with 49 held", ok, held)
	}
	if ok, _ := r.log("incarnation mismatch"); ok {
		t.Fatal("the window did not restart at the line logged")
	}

	for i := range 2 * maxRepeatReasons {
		if ok, _ := r.log(fmt.Sprintf("hello from member %d refused", i)); !ok {
			t.Fatalf("distinct reason %d held back", i)
		}
	}
	if len(r.seen) > maxRepeatReasons {
		t.Fatalf("%d reasons remembered, bound %d", len(r.seen), maxRepeatReasons)
	}
}

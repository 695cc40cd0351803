package retry

import (
	"testing"
	"time"
)

// Retry delays are spread between half the backoff and all of it, so that
// clients that failed together do not retry together.
func TestRetryDelayIsJittered(t *testing.T) {
	const d = 40 * time.Millisecond
	seen := map[time.Duration]bool{}
	for range 200 {
		got := Jitter(d)
		if got < d/2 || got > d {
			t.Fatalf("Jitter(%v) = %v, want within [%v, %v]", d, got, d/2, d)
		}
		seen[got] = true
	}
	if len(seen) < 50 {
		t.Errorf("200 delays took only %d values: not jittered", len(seen))
	}
	if got := Jitter(0); got != 0 {
		t.Errorf("Jitter(0) = %v", got)
	}
}

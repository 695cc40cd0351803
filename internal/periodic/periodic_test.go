package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunCallsUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, time.Millisecond, func() {
			if calls.Add(1) == 3 {
				cancel()
			}
		})
	}()
	<-done
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3 (the third cancels)", n)
	}
}

// Package progress prints the harnesses' progress lines: a function called
// every period on a goroutine of its own, until the caller stops it.
package progress

import (
	"sync"
	"time"
)

// Every calls f every period until stop is called; stop returns once a
// call under way has returned, so nothing prints after it.
func Every(period time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

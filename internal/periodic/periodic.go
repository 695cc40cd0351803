// Package periodic calls a function at a fixed period until a context
// ends: the harnesses' metric polls and progress reports.
package periodic

import (
	"context"
	"time"
)

// Run calls f every d, the first time d from now, until ctx ends; it
// returns once ctx has ended and no call is running. No call starts after
// ctx ended, even when a tick was due at the same moment (select would
// pick either).
func Run(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil {
				return
			}
			f()
		}
	}
}

// Package gccost measures what a full garbage collection costs with a
// given heap, for the benchmarks that show a table of a million locks
// adds little to every collection (results/scale.md).
package gccost

import (
	"runtime"
	"testing"
	"time"
)

// Report runs b.N full collections with keep reachable and reports their
// mean duration as µs/gc. keep is what the benchmark built; the
// collection that precedes the timer leaves only it in the heap.
func Report(b *testing.B, keep any) {
	b.Helper()
	runtime.GC()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		runtime.GC()
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/gc")
	runtime.KeepAlive(keep)
}

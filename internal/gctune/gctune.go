// Package gctune bounds the garbage a process lets pile up between two
// collections, for a member that holds a big lock table.
//
// Go starts a collection once the heap has grown by GOGC percent of what
// was live after the last one. With a million locks held a member's live
// heap is about 400 MB, so at Go's default of 100 a cycle comes every
// 400 MB allocated, and its mark and sweep come in lumps that size: a
// runtime trace of a loaded leader showed the background sweeper holding
// the member's one core for 18 ms at a stretch, every connection waiting
// behind it, and the benchmark's p99 at a million held moved with how many
// of those cycles fell in its window. Capping the garbage per cycle keeps
// each lump small; the cycles come more often, and the collector's CPU
// stays small because a member's table is pointer-free.
package gctune

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Config is how Run tunes.
type Config struct {
	// MaxGarbage is the most the heap may grow by between two collections,
	// in bytes, once GOGC's share of the live heap would be more.
	MaxGarbage uint64
	// MinPercent is the lowest GOGC Run sets, however big the live heap.
	MinPercent int
	// Every is how often Run reads the live heap.
	Every time.Duration
}

// DefaultConfig caps a cycle at 100 MiB of garbage: GOGC 25 for the live
// heap of a million locks (results/scale.md has what it changed).
func DefaultConfig() Config {
	return Config{MaxGarbage: 100 << 20, MinPercent: 10, Every: time.Second}
}

// Percent is the GOGC under which a live heap of live bytes lets at most
// maxGarbage of garbage pile up: Go's default of 100 while the live heap
// is under maxGarbage, else maxGarbage's share of it in percent, and never
// under minPercent (nor under 1).
func Percent(live, maxGarbage uint64, minPercent int) int {
	if live <= maxGarbage {
		return 100
	}
	return max(int(maxGarbage/(live/100)), minPercent, 1)
}

// Run sets GOGC from the live heap every cfg.Every (a second if not
// positive) until ctx ends, then puts back the GOGC it found. It does
// nothing when the GOGC or GOMEMLIMIT environment variable is set: an
// operator's own tuning of the collector wins. One Run per process: GOGC
// is the process's.
func Run(ctx context.Context, cfg Config) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	every := cfg.Every
	if every <= 0 {
		every = time.Second
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	set, found, saved := 0, 0, false
	defer func() {
		if saved {
			debug.SetGCPercent(found)
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			if p := Percent(sample[0].Value.Uint64(), cfg.MaxGarbage, cfg.MinPercent); !saved || p != set {
				prev := debug.SetGCPercent(p)
				if !saved {
					found, saved = prev, true
				}
				set = p
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Start runs Run with cfg on a goroutine of its own until the returned
// stop is called; stop returns once Run has put GOGC back.
func Start(cfg Config) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx, cfg) }()
	return func() { cancel(); <-done }
}

package member

import (
	"fmt"
	"testing"
	"time"
)

// A leader keeps at most MaxUncommitted entries proposed and not
// committed; what is decided meanwhile waits and goes into one entry once
// a commit frees the pipeline. Unbounded, a leader whose followers lag
// proposes an entry per command (each costing every member a message, an
// append and a sync), and the cluster stays in that mode at a fraction of
// its throughput.
func TestLeaderBoundsEntriesInFlightAndBatchesTheRest(t *testing.T) {
	for _, limit := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			c := newCluster(t, 3, func(cfg *Config) { cfg.MaxUncommitted = limit })
			c.elect(1)
			leader := c.cores[1]
			last := func() uint64 { i, _ := c.stores[1].LastIndex(); return i }
			base := last()
			// The followers do not answer: nothing commits. Each acquire
			// is decided alone, with a Ready between.
			const n = 10
			for i := range n {
				leader.Submit(c.now, Request{Handle: uint64(100 + i), Op: OpAcquire, Key: fmt.Sprintf("k%d", i), Lease: time.Minute})
				for c.handle(1) {
				}
			}
			if got := last() - base; got != uint64(limit) {
				t.Fatalf("limit %d: the leader appended %d entries with none committed, want %d", limit, got, limit)
			}
			if leader.HasReady() {
				t.Fatalf("limit %d: a full pipeline still reports a Ready (the driver would spin)", limit)
			}
			// Commits free the pipeline: the waiting acquires share one entry.
			c.settle()
			for i := range n {
				if a := c.answer(1, uint64(100+i)); a.Err != nil {
					t.Fatalf("acquire %d: %v", i, a.Err)
				}
			}
			sizes := map[uint64]int{}
			for _, e := range c.journal[1] {
				if e.Index > base {
					sizes[e.Index] = len(e.Commands)
				}
			}
			if got := sizes[base+uint64(limit)+1]; got != n-limit {
				t.Fatalf("limit %d: entries after %d hold %v commands, want entry %d to hold the %d that waited", limit, base, sizes, base+uint64(limit)+1, n-limit)
			}
		})
	}
}

package member

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A snapshot waits until the log since the last one is as big as the
// table's encoding, besides SnapshotEvery entries: a big table is not
// written again every few entries (each snapshot costs at most the log it
// retires). SnapshotByEntries takes one every SnapshotEvery entries.
func TestSnapshotWaitsForALogAsBigAsTheTable(t *testing.T) {
	for _, byEntries := range []bool{false, true} {
		t.Run(fmt.Sprintf("by_entries=%v", byEntries), func(t *testing.T) {
			c := newCluster(t, 1, func(cfg *Config) { cfg.SnapshotEvery, cfg.SnapshotByEntries = 5, byEntries })
			c.elect(1)
			key := strings.Repeat("k", 200)
			// 6,000 locks of 200-byte keys: a table of about 1.3 MB (over
			// smallTable), made by 6,000 entries of about the same size.
			for i := range 6000 {
				c.call(1, Request{Handle: uint64(10000 + i), Op: OpAcquire, Key: fmt.Sprintf("%s%04d", key, i), Lease: time.Hour})
			}
			last := c.cores[1].lastSnap
			// 20 entries of small keys: 20 x ~30 bytes, far below the table.
			for i := range 20 {
				c.call(1, Request{Handle: uint64(20000 + i), Op: OpAcquire, Key: fmt.Sprintf("s%d", i), Lease: time.Hour})
			}
			took := c.cores[1].lastSnap > last
			if took != byEntries {
				t.Fatalf("a snapshot after 20 small entries over a 1.3 MB table: %v, want %v", took, byEntries)
			}
		})
	}
}

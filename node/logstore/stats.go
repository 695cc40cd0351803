package logstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// StorageStats is what pebble reports of the log store's LSM tree: the
// background work (flushes and compactions) that shares the disk and the
// cores with the commit path, and the write storeStats it causes, when a
// synced append waits for a flush or a compaction.
type StorageStats struct {
	// CompactionsInProgress and CompactionDebtBytes are now: the
	// compactions running, and pebble's estimate of the bytes left to
	// compact before the tree is stable (0 on a settled store).
	CompactionsInProgress int64
	CompactionDebtBytes   uint64
	// L0Files and L0Sublevels: files in level 0, and its read
	// amplification; pebble storeStats writes when sublevels pile up.
	L0Files     int64
	L0Sublevels int64
	// Compactions, Flushes and WriteStalls count since the store opened;
	// WriteStallSeconds is the time writes waited in those storeStats.
	Compactions       int64
	Flushes           int64
	WriteStalls       int64
	WriteStallSeconds float64
	// DiskBytes is the space the store's files take.
	DiskBytes uint64
}

// storeStats counts pebble's write stalls, from its event listener
// (stallCount, stallNanos, stallSince: the running stall's start in unix
// nanos, 0 when none); mu keeps a reading of the statistics from meeting
// the store's Close (a metrics scrape can arrive while the member stops).
type storeStats struct {
	mu     sync.RWMutex
	closed bool

	// damage is the first damaged data pebble reported (an sstable
	// whose checksum fails); nil: none.
	damage atomic.Pointer[DamagedError]

	stallCount atomic.Int64
	stallNanos atomic.Int64
	stallSince atomic.Int64
}

func (s *storeStats) listener() *pebble.EventListener {
	return &pebble.EventListener{
		WriteStallBegin: func(pebble.WriteStallBeginInfo) {
			s.stallCount.Add(1)
			s.stallSince.Store(time.Now().UnixNano())
		},
		WriteStallEnd: func() {
			if start := s.stallSince.Swap(0); start != 0 {
				s.stallNanos.Add(time.Now().UnixNano() - start)
			}
		},
	}
}

// StorageStats reads the store's LSM statistics; it is cheap enough for a
// metrics scrape. A closed store reads as zero.
func (s *Disk) StorageStats() StorageStats {
	s.stats.mu.RLock()
	defer s.stats.mu.RUnlock()
	if s.stats.closed {
		return StorageStats{}
	}
	m := s.db.Metrics()
	return StorageStats{
		CompactionsInProgress: m.Compact.NumInProgress,
		CompactionDebtBytes:   m.Compact.EstimatedDebt,
		L0Files:               m.Levels[0].TablesCount,
		L0Sublevels:           int64(m.Levels[0].Sublevels),
		Compactions:           m.Compact.Count,
		Flushes:               m.Flush.Count,
		WriteStalls:           s.stats.stallCount.Load(),
		WriteStallSeconds:     time.Duration(s.stats.stallNanos.Load()).Seconds(),
		DiskBytes:             m.DiskSpaceUsage(),
	}
}

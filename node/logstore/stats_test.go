package logstore

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// The statistics follow the LSM's work: a flush and a compaction are
// counted, the files take space, a stall the event listener reports is
// counted with its time, and a closed store reads as zero instead of
// reaching into a closed pebble (a scrape can meet a member's stop).
func TestStorageStatsFollowTheLSM(t *testing.T) {
	s := openWithEntries(t, t.TempDir(), 500)
	before := s.StorageStats()
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Compact(t.Context(), entryKey(0), entryKey(1<<40), true); err != nil {
		t.Fatal(err)
	}
	after := s.StorageStats()
	if after.Flushes <= before.Flushes || after.Compactions <= before.Compactions || after.DiskBytes == 0 {
		t.Errorf("after a flush and a compaction: %+v (before %+v)", after, before)
	}
	if after.CompactionsInProgress != 0 {
		t.Errorf("%d compactions in progress after a manual one returned", after.CompactionsInProgress)
	}
	l := s.stats.listener()
	l.WriteStallBegin(pebble.WriteStallBeginInfo{})
	l.WriteStallEnd()
	l.WriteStallEnd() // pebble pairs them; a stray end adds nothing
	if got := s.StorageStats(); got.WriteStalls != after.WriteStalls+1 || got.WriteStallSeconds < after.WriteStallSeconds {
		t.Errorf("after one stall: %d stalls, %.6fs (before %d, %.6fs)", got.WriteStalls, got.WriteStallSeconds, after.WriteStalls, after.WriteStallSeconds)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.StorageStats(); got != (StorageStats{}) {
		t.Errorf("closed store reads %+v, want zero", got)
	}
}

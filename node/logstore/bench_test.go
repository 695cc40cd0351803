package logstore

import (
	"log/slog"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// BenchmarkSaveSynced is one Ready's write: a small entry and the hard state
// in one synced pebble batch. Compare with the fsync floor that
// `raftlock bench` measures.
func BenchmarkSaveSynced(b *testing.B) {
	s, err := Open(b.TempDir(), []uint64{1}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 64)
	b.ResetTimer()
	for i := range b.N {
		idx := uint64(i + 1)
		e := &raftpb.Entry{Term: new(uint64(1)), Index: new(idx), Data: data}
		if err := s.Save(&raftpb.HardState{Term: new(uint64(1)), Commit: new(idx - 1)}, []*raftpb.Entry{e}, nil, true); err != nil {
			b.Fatal(err)
		}
	}
}

package node

import (
	"log/slog"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func ents(term uint64, from, to uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := from; i <= to; i++ {
		out = append(out, &raftpb.Entry{Term: new(term), Index: new(i), Data: []byte{byte(i)}})
	}
	return out
}

// A conflicting append truncates the old suffix, on disk too: after a
// restart the log must not resurrect entries the new leader overwrote.
func TestDiskStorageTruncatesConflictingSuffix(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenDiskStorage(dir, []uint64{1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(&raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(0))}, ents(1, 1, 10), nil, true); err != nil {
		t.Fatal(err)
	}
	// A new leader in term 2 overwrites from index 6 with fewer entries.
	if err := s.Save(&raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(0))}, ents(2, 6, 7), nil, true); err != nil {
		t.Fatal(err)
	}
	check := func(s *DiskStorage, when string) {
		last, _ := s.LastIndex()
		if last != 7 {
			t.Fatalf("%s: last index %d, want 7", when, last)
		}
		if term, _ := s.Term(6); term != 2 {
			t.Fatalf("%s: term of entry 6 is %d, want 2", when, term)
		}
		if term, _ := s.Term(5); term != 1 {
			t.Fatalf("%s: term of entry 5 is %d, want 1", when, term)
		}
	}
	check(s, "before restart")
	s.Close()
	s, err = OpenDiskStorage(dir, []uint64{1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "after restart")
	hs, _, _ := s.InitialState()
	if hs.GetTerm() != 2 {
		t.Fatalf("hard state term %d after restart", hs.GetTerm())
	}
}

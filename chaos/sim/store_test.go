package sim

import (
	"math/rand/v2"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/internal/storagetest"
)

func ents(term, from, to uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := from; i <= to; i++ {
		out = append(out, &raftpb.Entry{Index: new(i), Term: new(term), Data: []byte{byte(i)}})
	}
	return out
}

func hardState(term, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Commit: new(commit), Vote: new(uint64(1))}
}

var voters = []uint64{1, 2, 3}

func openStore(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Open(voters); err != nil {
		t.Fatal(err)
	}
}

// logOf reads the mirror: first and last index, and every entry's term.
func logOf(t *testing.T, s *Store) (uint64, uint64, []uint64, *raftpb.HardState) {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	terms := storagetest.Terms(t, s)
	hs, _, _ := s.InitialState()
	return first, last, terms, hs
}

func TestStoreCrashLosesOnlyUnsyncedWrites(t *testing.T) {
	s := NewStore()
	openStore(t, s)
	if err := s.Save(hardState(1, 0), ents(1, 1, 5), nil, true, false, false); err != nil {
		t.Fatal(err)
	}
	// Unsynced: a commit-only hard state and more entries.
	if err := s.Save(hardState(1, 3), nil, nil, false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(hardState(1, 3), ents(1, 6, 8), nil, false, false, false); err != nil {
		t.Fatal(err)
	}
	if s.Unsynced() != 2 {
		t.Fatalf("unsynced %d, want 2", s.Unsynced())
	}
	// A power loss keeps a prefix: find seeds that keep none and all.
	seen := map[int]bool{}
	for seed := uint64(0); seed < 40 && len(seen) < 3; seed++ {
		c := &Store{durable: s.durable, pending: append([]batch(nil), s.pending...)}
		c.durable.ents = append([]*raftpb.Entry(nil), s.durable.ents...)
		kept, lost := c.Crash(rand.New(rand.NewPCG(seed, 1)))
		if kept+lost != 2 {
			t.Fatalf("kept %d lost %d", kept, lost)
		}
		seen[kept] = true
		openStore(t, c)
		_, last, _, hs := logOf(t, c)
		switch kept {
		case 0:
			if last != 5 || hs.GetCommit() != 0 {
				t.Fatalf("nothing kept: last %d commit %d, want 5 0", last, hs.GetCommit())
			}
		case 1:
			if last != 5 || hs.GetCommit() != 3 {
				t.Fatalf("one kept: last %d commit %d, want 5 3", last, hs.GetCommit())
			}
		case 2:
			if last != 8 || hs.GetCommit() != 3 {
				t.Fatalf("all kept: last %d commit %d, want 8 3", last, hs.GetCommit())
			}
		}
	}
	if len(seen) != 3 {
		t.Fatalf("prefixes seen %v, want 0, 1 and 2", seen)
	}
	// A kill keeps every write; a later sync makes earlier writes durable.
	s.Kill()
	openStore(t, s)
	if _, last, _, hs := logOf(t, s); last != 8 || hs.GetCommit() != 3 {
		t.Fatalf("after kill: last %d commit %d", last, hs.GetCommit())
	}
	s.Save(hardState(1, 4), nil, nil, false, false, false)
	s.Save(hardState(1, 4), ents(1, 9, 9), nil, true, false, false)
	s.Crash(rand.New(rand.NewPCG(1, 1)))
	openStore(t, s)
	if _, last, _, hs := logOf(t, s); last != 9 || hs.GetCommit() != 4 {
		t.Fatalf("after synced write and crash: last %d commit %d", last, hs.GetCommit())
	}
}

func TestStoreSnapshotInstallDropsEveryStoredEntry(t *testing.T) {
	s := NewStore()
	openStore(t, s)
	s.Save(hardState(1, 2), ents(1, 1, 10), nil, true, false, false)
	snap := &raftpb.Snapshot{Data: []byte("x"), Metadata: &raftpb.SnapshotMetadata{
		Index: new(uint64(5)), Term: new(uint64(2)), ConfState: &raftpb.ConfState{Voters: voters}}}
	if err := s.Save(hardState(2, 5), ents(2, 6, 6), snap, true, false, false); err != nil {
		t.Fatal(err)
	}
	if _, first, last, _, _ := s.DurableLog(); first != 6 || last != 6 {
		t.Fatalf("durable entries %d..%d, want only 6 (the batch's own)", first, last)
	}
	s.Kill()
	openStore(t, s)
	first, last, terms, _ := logOf(t, s)
	if first != 6 || last != 6 || terms[0] != 2 {
		t.Fatalf("reopened log %d..%d terms %v, want 6..6 term 2", first, last, terms)
	}
}

func TestStoreReopenIsTheSameLog(t *testing.T) {
	s := NewStore()
	openStore(t, s)
	s.Save(hardState(1, 0), ents(1, 1, 12), nil, true, false, false)
	// An append in a new term overwrites the suffix after 8.
	s.Save(hardState(2, 7), ents(2, 9, 10), nil, true, false, false)
	if err := s.Compact(7, &raftpb.ConfState{Voters: voters}, []byte("snap"), 4, false); err != nil {
		t.Fatal(err)
	}
	f1, l1, t1, hs1 := logOf(t, s)
	snap1, _ := s.Snapshot()
	s.Kill()
	openStore(t, s)
	f2, l2, t2, hs2 := logOf(t, s)
	snap2, _ := s.Snapshot()
	if f1 != f2 || l1 != l2 || len(t1) != len(t2) || hs1.GetCommit() != hs2.GetCommit() ||
		snap1.GetMetadata().GetIndex() != snap2.GetMetadata().GetIndex() {
		t.Fatalf("before %d..%d %v %v snap %d, after %d..%d %v %v snap %d",
			f1, l1, t1, hs1, snap1.GetMetadata().GetIndex(), f2, l2, t2, hs2, snap2.GetMetadata().GetIndex())
	}
	for i := range t1 {
		if t1[i] != t2[i] {
			t.Fatalf("terms differ: %v vs %v", t1, t2)
		}
	}
	if l2 != 10 || f2 != 5 {
		t.Fatalf("log %d..%d, want 5..10 (entry 4 kept as the base, suffix after 10 truncated)", f2, l2)
	}
}

func TestStoreCompactAboveLastIsAnError(t *testing.T) {
	s := NewStore()
	openStore(t, s)
	s.Save(hardState(1, 3), ents(1, 1, 3), nil, true, false, false)
	err := s.Compact(9, &raftpb.ConfState{Voters: voters}, nil, 5, false)
	if err == nil || !strings.Contains(err.Error(), "above the last stored entry") {
		t.Fatalf("compact above last: %v", err)
	}
}

func TestStoreInjectedErrorStopsButNeverCorrupts(t *testing.T) {
	s := NewStore()
	openStore(t, s)
	s.Save(hardState(1, 3), ents(1, 1, 3), nil, true, false, false)
	if err := s.Save(hardState(1, 3), ents(1, 4, 6), nil, true, false, true); err == nil {
		t.Fatal("injected error not returned")
	}
	s.Crash(rand.New(rand.NewPCG(3, 3)))
	openStore(t, s)
	if _, last, _, _ := logOf(t, s); last != 3 && last != 6 {
		t.Fatalf("after a failed sync the log ends at %d, want 3 or 6", last)
	}
}

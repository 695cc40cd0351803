package logstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/internal/storagetest"
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
	s, err := Open(dir, []uint64{1}, slog.New(slog.DiscardHandler))
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
	check := func(s *Disk, when string) {
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
	s, err = Open(dir, []uint64{1}, slog.New(slog.DiscardHandler))
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

// openWithEntries opens the storage in dir and saves, synced, entries 1
// to n of term 1, all committed.
func openWithEntries(t *testing.T, dir string, n uint64) *Disk {
	t.Helper()
	s := openTestStorage(t, dir)
	if err := s.Save(&raftpb.HardState{Term: new(uint64(1)), Commit: new(n)}, ents(1, 1, n), nil, true); err != nil {
		t.Fatal(err)
	}
	return s
}

func openTestStorage(t *testing.T, dir string) *Disk {
	t.Helper()
	s, err := Open(dir, []uint64{1, 2, 3}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open storage: %v", err)
	}
	return s
}

// Installing a snapshot replaces the whole log: entries above the snapshot
// from an older term must not come back after a restart, or the member
// would read back terms going backwards and could grant a vote it must
// refuse. The snapshot and the next entry arrive in separate Readies.
func TestDiskStorageSnapshotInstallDropsEveryStoredEntry(t *testing.T) {
	for _, together := range []bool{false, true} {
		dir := t.TempDir()
		s := openTestStorage(t, dir)
		if err := s.Save(&raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(0))}, ents(1, 1, 12), nil, true); err != nil {
			t.Fatal(err)
		}
		snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(8)), Term: new(uint64(2)),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: []byte("table")}
		hs := &raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(8))}
		if together {
			if err := s.Save(hs, ents(2, 9, 9), snap, true); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := s.Save(hs, nil, snap, true); err != nil {
				t.Fatal(err)
			}
			if err := s.Save(nil, ents(2, 9, 9), nil, true); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		s = openTestStorage(t, dir)
		if last, _ := s.LastIndex(); last != 9 {
			t.Fatalf("together=%v: last index after reopen %d (terms from first: %v), want 9", together, last, storagetest.Terms(t, s))
		}
		if term, _ := s.Term(9); term != 2 {
			t.Fatalf("together=%v: term of entry 9 is %d, want 2", together, term)
		}
		s.Close()
	}
}

// Entries kept behind a snapshot for slow followers (SnapshotKeep) are
// still there after a restart, so a restart does not force a snapshot on
// every follower that lags by less than the keep.
func TestDiskStorageReloadsEntriesKeptBehindSnapshot(t *testing.T) {
	dir := t.TempDir()
	s := openWithEntries(t, dir, 30)
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := s.Compact(25, cs, []byte("table@25"), 20); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		if first, _ := s.FirstIndex(); first != 21 {
			t.Fatalf("%s: first index %d, want 21", when, first)
		}
		es, err := s.Entries(21, 31, 1<<30)
		if err != nil || len(es) != 10 || es[0].GetData()[0] != 21 {
			t.Fatalf("%s: entries 21..30: %d entries, %v", when, len(es), err)
		}
		snap, _ := s.Snapshot()
		data, _ := s.SnapshotData(snap.GetData())
		if snap.GetMetadata().GetIndex() != 25 || string(data) != "table@25" || len(snap.GetMetadata().GetConfState().GetVoters()) != 3 {
			t.Fatalf("%s: snapshot %v", when, snap.GetMetadata())
		}
	}
	check("before reopen")
	s.Close()
	s = openTestStorage(t, dir)
	defer s.Close()
	check("after reopen")
}

func TestDataDirectoryInUseSaysSo(t *testing.T) {
	dir := t.TempDir()
	s := openTestStorage(t, dir)
	defer s.Close()
	_, err := Open(dir, []uint64{1, 2, 3}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open of a data directory: %v, want 'in use by another process'", err)
	}
}

// A member that stops while it writes a snapshot (a big table's takes
// tens of seconds, paced) must stop at once and leave nothing half done:
// the write ends with the context, no file stays behind, and the log,
// snapshot and entries are as they were, also after a reopen.
func TestCancelledSnapshotLeavesTheLogWhole(t *testing.T) {
	dir := t.TempDir()
	s := openWithEntries(t, dir, 30)
	ctx, cancel := context.WithCancel(context.Background())
	wrote := make(chan struct{})
	// 64 MiB at 1 MiB/s would take a minute.
	write := func(w io.Writer) error {
		chunk := bytes.Repeat([]byte{'x'}, 1<<20)
		for i := range 64 {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			if i == 1 {
				close(wrote)
			}
		}
		return nil
	}
	go func() { <-wrote; cancel() }()
	start := time.Now()
	err := s.CompactFrom(ctx, Compaction{Index: 25, ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, Rate: 1 << 20, Write: write, CompactTo: 20})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("compact with its context cancelled: %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a cancelled snapshot write took %v to end", took)
	}
	check := func(when string) {
		t.Helper()
		if first, _ := s.FirstIndex(); first != 1 {
			t.Fatalf("%s: first index %d, want 1 (log not compacted)", when, first)
		}
		if es, err := s.Entries(1, 31, 1<<30); err != nil || len(es) != 30 {
			t.Fatalf("%s: entries 1..30: %d entries, %v", when, len(es), err)
		}
		if snap, _ := s.Snapshot(); snap.GetMetadata().GetIndex() != 0 {
			t.Fatalf("%s: snapshot at %d, want none", when, snap.GetMetadata().GetIndex())
		}
		left, err := os.ReadDir(filepath.Join(dir, snapDir))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Fatalf("%s: snapshot folder holds %v, want nothing", when, left)
		}
	}
	check("before reopen")
	s.Close()
	s = openTestStorage(t, dir)
	defer s.Close()
	check("after reopen")
}

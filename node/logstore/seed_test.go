package logstore

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func restoredSnapshot(index, term uint64) *raftpb.Snapshot {
	return &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, Index: new(index), Term: new(term)}}
}

// A store seeded from a restored backup commits the snapshot at its own
// term: its hard state is written with the snapshot, so no crash can leave
// a member at term 0 over a log of term 7.
func TestSeedWritesTheHardStateWithTheSnapshot(t *testing.T) {
	fs := vfs.NewCrashableMem()
	log := slog.New(slog.DiscardHandler)
	s, err := OpenSeeded("d", fs, restoredSnapshot(50, 7), log)
	if err != nil {
		t.Fatal(err)
	}
	// Power loss right after the seed: only synced writes survive.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	s.Close()
	s, err = OpenSeeded("d", crashed, InitialSnapshot([]uint64{1}, nil), log)
	if err != nil {
		t.Fatalf("reopen after a crash: %v", err)
	}
	defer s.Close()
	hs, _, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetTerm() != 7 || hs.GetCommit() != 50 {
		t.Fatalf("hard state after the seed = term %d commit %d, want term 7 commit 50", hs.GetTerm(), hs.GetCommit())
	}
	if first, _ := s.FirstIndex(); first != 51 {
		t.Fatalf("first index %d, want 51 (the seed ignored the second initial snapshot)", first)
	}
}

// A store holding a snapshot but a hard state of a lower term (a seed
// interrupted by an older version, or a damaged store) is refused with a
// clear error instead of starting a member whose terms would go backwards.
func TestStoreWithTermBelowItsSnapshotRefused(t *testing.T) {
	fs := vfs.NewMem()
	db, err := pebble.Open("d", &pebble.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := proto.Marshal(restoredSnapshot(50, 7))
	if err := db.Set(keySnapshot, data, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := OpenSeeded("d", fs, InitialSnapshot([]uint64{1}, nil), slog.New(slog.DiscardHandler))
	if err == nil {
		s.Close()
		t.Fatal("a store at term 0 over a snapshot of term 7 opened")
	}
	if !strings.Contains(err.Error(), "below the snapshot's term") {
		t.Fatalf("error %q does not say why", err)
	}
}

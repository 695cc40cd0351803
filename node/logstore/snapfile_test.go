package logstore

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
)

func snapFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	des, _ := os.ReadDir(filepath.Join(dir, snapDir))
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	slices.Sort(names)
	return names
}

// Snapshot data lives in one file beside pebble: each compaction or
// install replaces the file, a reopen reads the data back whole, and what
// an interrupted write left (a .tmp, a file no reference names) is
// removed at open.
func TestSnapshotDataLivesInOneFile(t *testing.T) {
	dir := t.TempDir()
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	s := openWithEntries(t, dir, 20)
	big := bytes.Repeat([]byte("lock-table "), 3<<20) // past snapSyncEvery: written in synced pieces
	if err := s.Compact(10, cs, big[:1000], 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(15, cs, big, 12); err != nil {
		t.Fatal(err)
	}
	if got := snapFilesIn(t, dir); len(got) != 1 || !strings.HasPrefix(got[0], "00000000000000000015-") {
		t.Fatalf("snapshot files after two compactions: %v, want the one at 15", got)
	}
	// An older snapshot than the stored one changes nothing.
	if err := s.Compact(12, cs, []byte("old"), 11); err != nil {
		t.Fatal(err)
	}
	if got := snapFilesIn(t, dir); len(got) != 1 {
		t.Fatalf("snapshot files after an out-of-date compaction: %v", got)
	}
	s.Close()
	for _, n := range []string{"00000000000000000099-7.snap", "00000000000000000100-8.snap.tmp"} {
		os.WriteFile(filepath.Join(dir, snapDir, n), []byte("left by a crash"), 0o644)
	}
	s = openTestStorage(t, dir)
	snap, _ := s.Snapshot()
	if !isRef(snap.GetData()) || len(snap.GetData()) > 100 {
		t.Fatalf("the store holds %d bytes of snapshot data in memory, want only a reference to its file", len(snap.GetData()))
	}
	data, err := s.SnapshotData(snap.GetData())
	if snap.GetMetadata().GetIndex() != 15 || err != nil || !bytes.Equal(data, big) {
		t.Fatalf("reopened snapshot at %d with %d bytes (%v), want 15 with %d", snap.GetMetadata().GetIndex(), len(data), err, len(big))
	}
	r, size, _, ok, err := s.OpenSnapshot(snap.GetData())
	if err != nil || !ok || size != int64(len(big)) {
		t.Fatalf("open the snapshot to stream: %d bytes, ok %v, %v", size, ok, err)
	}
	r.Close()
	if got := snapFilesIn(t, dir); len(got) != 1 || !strings.HasPrefix(got[0], "00000000000000000015-") {
		t.Fatalf("snapshot files after reopen: %v, want only the referenced one", got)
	}
	// A received snapshot replaces the file too.
	recv := &raftpb.Snapshot{Data: []byte("from the leader"), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(40)), Term: new(uint64(2)), ConfState: cs}}
	if err := s.Save(&raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(40))}, nil, recv, true); err != nil {
		t.Fatal(err)
	}
	if got := snapFilesIn(t, dir); len(got) != 1 || !strings.HasPrefix(got[0], "00000000000000000040-") {
		t.Fatalf("snapshot files after an install: %v", got)
	}
	s.Close()
}

// A snapshot file that does not match its reference's SHA-256 is refused
// when its data is read (a member reads it as it starts), naming the
// file, rather than handing the member damaged data.
func TestDamagedSnapshotFileRefusedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := openWithEntries(t, dir, 5)
	if err := s.Compact(5, &raftpb.ConfState{Voters: []uint64{1}}, []byte("the lock table"), 3); err != nil {
		t.Fatal(err)
	}
	s.Close()
	name := snapFilesIn(t, dir)[0]
	os.WriteFile(filepath.Join(dir, snapDir, name), []byte("the lock tablX"), 0o644)
	s, err := Open(dir, []uint64{1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap, _ := s.Snapshot()
	if _, err := s.SnapshotData(snap.GetData()); err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("read a damaged snapshot file: %v, want an error naming %s", err, name)
	}
}

// syncCounter counts the syncs of the files it creates.
type syncCounter struct {
	vfs.FS
	syncs *int
}

func (c syncCounter) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	return countedFile{f, c.syncs}, err
}

type countedFile struct {
	vfs.File
	syncs *int
}

func (f countedFile) Sync() error { *f.syncs++; return f.File.Sync() }

// A member's own snapshot is written paced and synced in small pieces, so
// that a big table's file never floods the disk its log syncs on: 4 MiB
// at 8 MiB/s takes half a second, in at least four syncs, and reads back
// whole.
func TestOwnSnapshotFileIsPacedAndSyncedInPieces(t *testing.T) {
	var syncs int
	files := snapFiles{fs: syncCounter{vfs.NewMem(), &syncs}, dir: "snap"}
	data := bytes.Repeat([]byte("paced "), (4<<20)/6)
	write := func(w io.Writer) error { _, err := w.Write(data); return err }

	start := time.Now()
	name := "7-1.snap"
	if err := files.writeFile(context.Background(), name, 8<<20, write, io.Discard); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("4 MiB paced at 8 MiB/s took %v, want about 500ms", took)
	}
	if syncs < len(data)/snapSyncEvery {
		t.Errorf("%d syncs for %d bytes, want one per %d", syncs, len(data), snapSyncEvery)
	}
	f, err := files.fs.Open(files.path(name))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("paced file reads back %d bytes (err %v), want %d", len(got), err, len(data))
	}

}

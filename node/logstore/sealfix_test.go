package logstore

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A rollback after a clean stop: the build before (same pebble, which
// ignores the seal) opens the store and writes entry 6. The seal still
// says last index 5, but the directory holds a newer log and MANIFEST
// than the seal names: it is ignored (and removed), not refused.
func TestSealIgnoredAfterAnotherOpen(t *testing.T) {
	dir := t.TempDir()
	s := openWithEntries(t, dir, 5)
	s.Close()
	// The build before: plain pebble at its default format, its writes.
	db, err := pebble.Open(dir, &pebble.Options{MemTableSize: 64 << 20})
	if err != nil {
		t.Fatalf("the build before cannot open the store: %v", err)
	}
	e, _ := proto.Marshal(ents(1, 6, 6)[0])
	hs, _ := proto.Marshal(&raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(2)), Commit: new(uint64(6))})
	b := db.NewBatch()
	b.Set(entryKey(6), e, nil)
	b.Set(keyHardState, hs, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = reopen(dir, Options{})
	if err != nil {
		t.Fatalf("an intact store opened by the build before is refused: %v", err)
	}
	defer s.Close()
	if last, _ := s.LastIndex(); last != 6 {
		t.Fatalf("last index %d, want 6", last)
	}
	if s.Opened().Sealed {
		t.Fatal("the stale seal was taken as matching")
	}
	if _, err := os.Stat(filepath.Join(dir, sealName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stale seal is still there: %v", err)
	}
}

// failRemoveFS fails removing one file, as a permission error would.
type failRemoveFS struct {
	vfs.FS
	name string
}

func (f failRemoveFS) Remove(n string) error {
	if f.PathBase(n) == f.name {
		return &os.PathError{Op: "remove", Path: n, Err: os.ErrPermission}
	}
	return f.FS.Remove(n)
}

// A file-system error at the open of a sealed store (removing its seal)
// is that error, not a refusal calling intact data damaged.
func TestSealRemoveErrorIsNotDamage(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	mem := vfs.NewMem()
	s, err := OpenFS("/data", mem, []uint64{1, 2, 3}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	saveMany(t, s, 1, 5, 100)
	s.Close()
	_, err = OpenFS("/data", failRemoveFS{mem, sealName}, []uint64{1, 2, 3}, quiet)
	var de *DamagedError
	if err == nil || errors.As(err, &de) || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("open: %v, want the permission error as it is", err)
	}
	// Once the file system works again the store opens (the failed open
	// started a new log, so the seal is ignored as another open's).
	s, err = OpenFS("/data", mem, []uint64{1, 2, 3}, quiet)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	s.Close()
}

// A seal that cannot be read (here: a directory in its place, EISDIR) is
// a file-system error, not a damaged seal.
func TestSealReadErrorIsNotDamage(t *testing.T) {
	dir := t.TempDir()
	s := openWithEntries(t, dir, 5)
	s.Close()
	os.Remove(filepath.Join(dir, sealName))
	if err := os.Mkdir(filepath.Join(dir, sealName), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := reopen(dir, Options{})
	var de *DamagedError
	if err == nil || errors.As(err, &de) {
		t.Fatalf("open: %v, want the read error as it is", err)
	}
}

// Only pebble's corruption and its exact messages of damage are damage:
// an I/O error that names the MANIFEST or says "mismatch" is not.
func TestOpenIOErrorIsNotDamage(t *testing.T) {
	for _, msg := range []string{
		"open /d/MANIFEST-000005: permission denied",
		"read /d/manifest: input/output error",
		"version mismatch in the request",
	} {
		if looksDamaged(errors.New(msg)) {
			t.Errorf("%q taken for damage", msg)
		}
	}
	for _, msg := range []string{
		`pebble: malformed manifest file "MANIFEST-000005" for DB "/d"`,
		"L0: 000007: object size mismatch (/d/000007.sst): 740 (disk) != 1481 (MANIFEST)",
	} {
		if !looksDamaged(errors.New(msg)) {
			t.Errorf("%q not taken for damage", msg)
		}
	}
}

// A Save that commits but whose mirror then fails (a received snapshot
// older than the mirror's) leaves the mirror saying more than pebble
// holds: Close writes no seal, so the next open does not refuse the
// intact store.
func TestNoSealAfterACommitTheMirrorMissed(t *testing.T) {
	dir := t.TempDir()
	s := openTestStorage(t, dir)
	saveMany(t, s, 1, 10, 10)
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := s.Compact(5, cs, []byte("at 5"), 5); err != nil {
		t.Fatal(err)
	}
	old := &raftpb.Snapshot{Data: []byte("at 3"), Metadata: &raftpb.SnapshotMetadata{ConfState: cs, Index: new(uint64(3)), Term: new(uint64(1))}}
	if err := s.Save(nil, nil, old, true); err == nil {
		t.Fatal("an out-of-date snapshot was mirrored: the test no longer makes the mirror fail")
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, sealName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a seal was written from a mirror that missed a commit: %v", err)
	}
	s, err := reopen(dir, Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	s.Close()
}

// A second open of a live directory is refused by pebble's lock before
// it reads any log: with the planted bug it would otherwise cut the log
// the running pebble writes.
func TestWALScanWaitsForTheDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	s := openTestStorage(t, dir)
	defer s.Close()
	saveMany(t, s, 1, 300, 500)
	wal := newestWAL(t, dir)
	st, _ := os.Stat(wal)
	damage(t, wal, st.Size()/3, false)
	before, _ := os.ReadFile(wal)

	for _, o := range []Options{{}, {UnsafeTrustDamagedLog: true}} {
		_, err := reopen(dir, o)
		var de *DamagedError
		if err == nil || errors.As(err, &de) || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("second open (%+v) of a live directory: %v, want it in use", o, err)
		}
	}
	if after, _ := os.ReadFile(wal); !bytes.Equal(before, after) {
		t.Fatalf("a second open changed the live log %s: %d bytes, were %d", filepath.Base(wal), len(after), len(before))
	}
}

// A seal that does not match keeps every snapshot file: the refusal
// leaves the directory as it found it.
func TestSnapshotFilesKeptWhenTheSealRefuses(t *testing.T) {
	dir := t.TempDir()
	s := openTestStorage(t, dir)
	saveMany(t, s, 1, 10, 10)
	if err := s.Compact(5, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, []byte("at 5"), 5); err != nil {
		t.Fatal(err)
	}
	s.Close()
	stray := filepath.Join(dir, snapDir, "9-99"+snapSuffix)
	if err := os.WriteFile(stray, []byte("a newer snapshot pebble lost"), 0o644); err != nil {
		t.Fatal(err)
	}
	sl, ok, err := readSeal(vfs.Default, dir)
	if !ok || err != nil {
		t.Fatalf("no seal: %v", err)
	}
	sl.lastIndex++ // the store held more than it now does
	if err := writeSeal(vfs.Default, dir, sl); err != nil {
		t.Fatal(err)
	}
	_, err = reopen(dir, Options{})
	wantRefusal(t, err, "MANIFEST")
	if _, err := os.Stat(stray); err != nil {
		t.Fatalf("a refused open removed a snapshot file: %v", err)
	}
}

// A write-ahead log below the MANIFEST's minimum unflushed log number is
// never replayed: damage in it is not a refusal.
func TestDamageInAFlushedWALIsNotRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTestStorage(t, dir)
	saveMany(t, s, 1, 300, 500)
	wal := newestWAL(t, dir)
	old, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	saveMany(t, s, 301, 302, 500)
	crashStop(t, s, dir)
	if newestWAL(t, dir) == wal {
		t.Fatal("the flush did not start a new log")
	}
	// The flushed log, back (as pebble keeps some to recycle), damaged.
	old[len(old)/3] ^= 4
	if err := os.WriteFile(wal, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := minUnflushedLog(vfs.Default, dir); !ok {
		t.Fatal("the MANIFEST's log number was not read")
	} else if num, _ := isWAL(filepath.Base(wal)); num >= n {
		t.Fatalf("log %d is not below the minimum unflushed %d", num, n)
	}
	s, err = reopen(dir, Options{})
	if err != nil {
		t.Fatalf("damage in a flushed log refused: %v", err)
	}
	defer s.Close()
	if last, _ := s.LastIndex(); last != 302 {
		t.Fatalf("last index %d, want 302", last)
	}
}

package logstore

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
)

// saveMany saves entries from..to of term 1, each in a synced Ready of
// its own with a hard state committing it, as a member's loop does; each
// entry carries size bytes, so the log spans several 32 KiB blocks.
func saveMany(t *testing.T, s *Disk, from, to uint64, size int) {
	t.Helper()
	for i := from; i <= to; i++ {
		e := &raftpb.Entry{Term: new(uint64(1)), Index: new(i), Data: bytes.Repeat([]byte{byte(i)}, size)}
		if err := s.Save(&raftpb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(i)}, []*raftpb.Entry{e}, nil, true); err != nil {
			t.Fatal(err)
		}
	}
}

// newestWAL is the newest write-ahead log in dir: the one pebble writes.
func newestWAL(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	slices.Sort(m)
	if len(m) == 0 {
		t.Fatal("no write-ahead log")
	}
	return m[len(m)-1]
}

// damage flips bit 2 of path's byte at off, or cuts path at off.
func damage(t *testing.T, path string, off int64, truncate bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if truncate {
		b = b[:off]
	} else {
		b[off] ^= 4
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// crashStop closes s as a crash leaves it, for a real directory: closed,
// and without the clean-stop seal a crash never writes.
func crashStop(t *testing.T, s *Disk, dir string) {
	t.Helper()
	s.Close()
	if err := os.Remove(filepath.Join(dir, sealName)); err != nil {
		t.Fatal(err)
	}
}

func reopen(dir string, o Options) (*Disk, error) {
	return OpenWith(dir, vfs.Default, InitialSnapshot([]uint64{1, 2, 3}, nil), slog.New(slog.DiscardHandler), o)
}

// wantRefusal checks err is a refusal naming file.
func wantRefusal(t *testing.T, err error, file string) {
	t.Helper()
	var de *DamagedError
	if !errors.As(err, &de) {
		t.Fatalf("open: %v, want a refusal naming %s", err, file)
	}
	if !strings.Contains(err.Error(), file) || !strings.HasPrefix(err.Error(), "refusing to start: ") {
		t.Fatalf("refusal %q does not name %s", err, file)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("refusal %q is more than one line", err)
	}
}

// A write-ahead log whose record fails its checksum with records synced
// after it is corrupt, not torn: pebble before its sync chunks took it
// for the log's end and dropped every record after it, synced entries and
// hard states included. The store refuses it, naming the file, even
// after a crash (no seal). The planted bug's store cuts the log there and
// starts over less than it had: the twin.
func TestWALCorruptInItsMiddleIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTestStorage(t, dir)
	saveMany(t, s, 1, 300, 500)
	crashStop(t, s, dir)
	wal := newestWAL(t, dir)
	st, _ := os.Stat(wal)
	damage(t, wal, st.Size()/3, false)

	_, err := reopen(dir, Options{})
	wantRefusal(t, err, filepath.Base(wal))
	// A refusal changes nothing: it refuses again.
	_, err = reopen(dir, Options{})
	wantRefusal(t, err, filepath.Base(wal))

	s, err = reopen(dir, Options{UnsafeTrustDamagedLog: true})
	if err != nil {
		t.Fatalf("the planted bug's store refused: %v", err)
	}
	defer s.Close()
	if last, _ := s.LastIndex(); last >= 300 {
		t.Fatalf("the planted bug's store holds up to %d: the damage was not in the middle", last)
	}
	if r := s.Opened(); r.LastIndex >= 300 || len(r.Dropped) != 1 {
		t.Fatalf("open report %+v, want the cut log and its last index", r)
	}
}

// After a crash, a record that fails its checksum with nothing synced
// after it is a torn write: dropped, as pebble recovers it, and reported.
func TestWALTornTailAfterACrashIsDropped(t *testing.T) {
	dir := t.TempDir()
	s := openTestStorage(t, dir)
	saveMany(t, s, 1, 20, 100)
	crashStop(t, s, dir)
	wal := newestWAL(t, dir)
	st, _ := os.Stat(wal)
	damage(t, wal, st.Size()-40, true) // a torn last write
	s, err := reopen(dir, Options{})
	if err != nil {
		t.Fatalf("a torn tail after a crash was refused: %v", err)
	}
	defer s.Close()
	if r := s.Opened(); len(r.Dropped) != 1 || r.Sealed {
		t.Fatalf("open report %+v, want the torn tail reported, no seal", r)
	}
}

// A member stopped cleanly leaves a seal saying what its store held: a
// log truncated (or its last entry's record damaged, which looks like a
// torn write) while it was stopped then holds less, and is refused naming
// the log. (The log's very last record is the empty one the clean stop
// synced with: damaging it loses nothing.) Without the seal, pebble drops what follows the cut and the store
// opens over a shorter log and an older hard state.
func TestDamageAfterACleanStopIsRefused(t *testing.T) {
	for _, c := range []struct {
		name     string
		truncate bool
		back     int64 // from the end
	}{{"truncated", true, 3000}, {"last entry's record flipped", false, 100}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTestStorage(t, dir)
			saveMany(t, s, 1, 40, 200)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			wal := newestWAL(t, dir)
			st, _ := os.Stat(wal)
			damage(t, wal, st.Size()-c.back, c.truncate)
			_, err := reopen(dir, Options{})
			wantRefusal(t, err, filepath.Base(wal))

			s, err = reopen(dir, Options{UnsafeTrustDamagedLog: true})
			if err != nil {
				t.Fatalf("the planted bug's store refused: %v", err)
			}
			defer s.Close()
			hs, _, _ := s.InitialState()
			if last, _ := s.LastIndex(); last >= 40 && hs.GetCommit() >= 40 {
				t.Fatalf("the damage lost nothing (last %d, commit %d): the test damaged nothing that mattered", last, hs.GetCommit())
			}
		})
	}
}

// The seal is removed, durably, when the store opens, before anything
// new is written: a crash after new writes must not find a seal that
// says less than the store holds (it would refuse a whole store), nor one
// that says more.
func TestSealIsGoneBeforeTheFirstNewWrite(t *testing.T) {
	fs := vfs.NewCrashableMem()
	quiet := slog.New(slog.DiscardHandler)
	s, err := OpenFS("/data", fs, []uint64{1, 2, 3}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	saveMany(t, s, 1, 10, 50)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat("/data/" + sealName); err != nil {
		t.Fatalf("no seal after a clean stop: %v", err)
	}
	s, err = OpenFS("/data", fs, []uint64{1, 2, 3}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Opened().Sealed {
		t.Fatal("the open did not check the seal")
	}
	saveMany(t, s, 11, 15, 50)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	s2, err := OpenFS("/data", crashed, []uint64{1, 2, 3}, quiet)
	if err != nil {
		t.Fatalf("reopen after a crash that followed a sealed open: %v", err)
	}
	defer s2.Close()
	if last, _ := s2.LastIndex(); last != 15 {
		t.Fatalf("last index %d after the crash, want 15", last)
	}
}

// A damaged seal is refused, naming it: the store cannot tell what it
// held.
func TestDamagedSealIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := openWithEntries(t, dir, 5)
	s.Close()
	damage(t, filepath.Join(dir, sealName), 6, false)
	_, err := reopen(dir, Options{})
	wantRefusal(t, err, sealName)
}

// pebble's own files, damaged: an sstable (whose checksum fails when the
// store reads it, where pebble's default would be a panic on a background
// goroutine), the MANIFEST and the OPTIONS file. Each open refuses with
// one line naming the file, or opens holding everything the seal says;
// none panics.
func TestDamagedPebbleFilesAreRefusedOrHarmless(t *testing.T) {
	for _, pat := range []string{"*.sst", "MANIFEST-*", "OPTIONS-*"} {
		for _, how := range []string{"flip-first", "flip-middle", "truncate-half"} {
			t.Run(pat+"/"+how, func(t *testing.T) {
				dir := t.TempDir()
				s := openWithEntries(t, dir, 50)
				if err := s.db.Flush(); err != nil {
					t.Fatal(err)
				}
				saveMany(t, s, 51, 60, 20)
				s.Close()
				m, _ := filepath.Glob(filepath.Join(dir, pat))
				if len(m) == 0 {
					t.Fatalf("no %s", pat)
				}
				slices.Sort(m)
				f := m[len(m)-1]
				st, _ := os.Stat(f)
				switch how {
				case "flip-first":
					damage(t, f, 0, false)
				case "flip-middle":
					damage(t, f, st.Size()/2, false)
				default:
					damage(t, f, st.Size()/2, true)
				}
				s, err := reopen(dir, Options{})
				if err != nil {
					wantRefusal(t, err, filepath.Base(f))
					return
				}
				defer s.Close()
				if last, _ := s.LastIndex(); last != 60 {
					t.Fatalf("opened holding up to %d, want 60", last)
				}
			})
		}
	}
}

// A snapshot file that does not match its reference is named when the
// member restores it at start (member.New reads it through SnapshotData).
func TestDamagedSnapshotFileIsNamed(t *testing.T) {
	dir := t.TempDir()
	s := openWithEntries(t, dir, 5)
	if err := s.Compact(5, &raftpb.ConfState{Voters: []uint64{1}}, []byte("the lock table"), 3); err != nil {
		t.Fatal(err)
	}
	s.Close()
	name := snapFilesIn(t, dir)[0]
	damage(t, filepath.Join(dir, snapDir, name), 3, false)
	s, err := reopen(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap, _ := s.Snapshot()
	_, err = s.SnapshotData(snap.GetData())
	var sfe *SnapshotFileError
	if !errors.As(err, &sfe) || sfe.Files != snapDir+"/"+name {
		t.Fatalf("read a damaged snapshot file: %v, want a SnapshotFileError naming %s", err, name)
	}
}

// An sstable of entries a compaction deleted, damaged, is refused at
// open, naming the file. (Here the load's own reads meet the block; a
// block they skip would first be read by a compaction, mid-run, and stop
// the member then, as a chaos run once showed: the open also reads every
// sstable whole, pebble's CheckLevels, for that case, which this test
// cannot isolate.)
func TestDamagedSSTableOfDeletedEntriesIsRefusedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := openTestStorage(t, dir)
	saveMany(t, s, 1, 200, 200)
	if err := s.db.Flush(); err != nil { // an sstable of entries 1..200
		t.Fatal(err)
	}
	saveMany(t, s, 201, 210, 200)
	if err := s.Compact(205, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, []byte("table"), 205); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	m, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	slices.Sort(m)
	if len(m) == 0 {
		t.Fatal("no sstable")
	}
	f := m[0] // the entries', all deleted now
	damage(t, f, 100, false)
	_, err := reopen(dir, Options{})
	wantRefusal(t, err, filepath.Base(f))
}

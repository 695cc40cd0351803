package member

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

func backupTable(t testing.TB) []byte {
	t.Helper()
	m := fsm.New()
	for _, k := range []string{"a", "b", "c"} {
		m.Apply(fsm.Command{Op: fsm.OpGrant, Key: k, LeaseMS: 60000, Owner: "owner-of-" + k})
	}
	m.Apply(fsm.Command{Op: fsm.OpRelease, Key: "b", Token: 2})
	return m.Snapshot()
}

func backupFile(t testing.TB) []byte {
	t.Helper()
	table := backupTable(t)
	meta, err := NewBackupMeta(42, 3, table, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	return EncodeBackup(meta, table)
}

func TestBackupRoundTrip(t *testing.T) {
	table := backupTable(t)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want, err := NewBackupMeta(42, 3, table, created)
	if err != nil {
		t.Fatal(err)
	}
	if want.Locks != 2 || want.LastToken != 3 || want.Size != int64(len(table)) || len(want.SHA256) != 64 {
		t.Fatalf("metadata %+v: want 2 locks, last token 3, size %d", want, len(table))
	}
	data := EncodeBackup(want, table)
	if !bytes.HasPrefix(data, []byte("RAFTLOCK-BACKUP 1\n{\"index\":42,\"term\":3,")) {
		t.Fatalf("file starts %q", data[:min(len(data), 60)])
	}
	meta, got, m, err := DecodeBackup(data)
	if err != nil {
		t.Fatal(err)
	}
	if meta != want || !bytes.Equal(got, table) {
		t.Fatalf("decoded %+v, want %+v", meta, want)
	}
	if l, ok := m.Get("c"); !ok || l.Token != 3 || l.LeaseMS != 60000 || l.Owner != "owner-of-c" || m.LastToken() != 3 {
		t.Fatalf("decoded table: c=%+v %v, last token %d", l, ok, m.LastToken())
	}
	// An empty table backs up too (a cluster with no lock held).
	empty := fsm.New().Snapshot()
	em, err := NewBackupMeta(1, 1, empty, created)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := DecodeBackup(EncodeBackup(em, empty)); err != nil {
		t.Fatalf("empty table: %v", err)
	}
}

// Any changed byte of the header or the table is refused; a changed byte
// of the metadata line is refused or, where it only changes the index,
// term or creation time, leaves the table that is restored the same.
func TestBackupCorruptByteRefused(t *testing.T) {
	data := backupFile(t)
	headerEnd := bytes.IndexByte(data, '\n') + 1
	metaEnd := headerEnd + bytes.IndexByte(data[headerEnd:], '\n') + 1
	_, table, _, err := DecodeBackup(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			c := bytes.Clone(data)
			c[i] ^= x
			meta, got, _, err := DecodeBackup(c)
			if err == nil && (i < headerEnd || i >= metaEnd-1) {
				t.Fatalf("byte %d ^ %#x: accepted", i, x)
			}
			if err != nil && !errors.Is(err, ErrBadBackup) {
				t.Fatalf("byte %d: error %v does not wrap ErrBadBackup", i, err)
			}
			if err == nil && (!bytes.Equal(got, table) || meta.Locks != 2 || meta.LastToken != 3) {
				t.Fatalf("byte %d ^ %#x: accepted with another table: %+v", i, x, meta)
			}
		}
	}
}

func TestBackupTruncatedRefused(t *testing.T) {
	data := backupFile(t)
	for n := range len(data) {
		if _, _, _, err := DecodeBackup(data[:n]); !errors.Is(err, ErrBadBackup) {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(data), err)
		}
	}
	if _, _, _, err := DecodeBackup(append(bytes.Clone(data), 0)); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("a trailing byte: %v", err)
	}
	other := bytes.Replace(data, []byte("RAFTLOCK-BACKUP 1"), []byte("RAFTLOCK-BACKUP 2"), 1)
	if _, _, _, err := DecodeBackup(other); err == nil || !bytes.Contains([]byte(err.Error()), []byte("version")) {
		t.Fatalf("version 2: %v", err)
	}
}

// A table whose counts disagree with its metadata is refused even when
// its checksum is right.
func TestBackupMetadataMustMatchTable(t *testing.T) {
	table := backupTable(t)
	meta, err := NewBackupMeta(42, 3, table, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	meta.LastToken = 2
	if _, _, _, err := DecodeBackup(EncodeBackup(meta, table)); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("wrong last token accepted: %v", err)
	}
	meta.LastToken, meta.Index = 3, 0
	if _, _, _, err := DecodeBackup(EncodeBackup(meta, table)); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("index 0 accepted: %v", err)
	}
}

func FuzzDecodeBackup(f *testing.F) {
	data := backupFile(f)
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Add([]byte("RAFTLOCK-BACKUP 1\n{}\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		meta, table, m, err := DecodeBackup(b)
		if err != nil {
			if !errors.Is(err, ErrBadBackup) {
				t.Fatalf("error %v does not wrap ErrBadBackup", err)
			}
			return
		}
		// What decodes re-encodes to a file that decodes the same.
		if m.Len() != meta.Locks || m.LastToken() != meta.LastToken {
			t.Fatalf("decoded %+v with a table of %d locks", meta, m.Len())
		}
		meta2, table2, _, err := DecodeBackup(EncodeBackup(meta, table))
		if err != nil || !meta2.Created.Equal(meta.Created) || meta2.Index != meta.Index || !bytes.Equal(table, table2) {
			t.Fatalf("re-encoded: %+v, %v", meta2, err)
		}
	})
}

package member

import (
	"errors"
	"reflect"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func TestSnapshotCarriesBookAndTable(t *testing.T) {
	m := fsm.New()
	m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "k", LeaseMS: 1000})
	book := NewBook(map[uint64]string{1: "a:1", 2: "b:2", 3: "c:3"})
	book.put(Member{ID: 4, PeerAddr: "d:4", ClientAddr: "d:5"})
	book.remove(1)
	got, gotBook, hasBook, err := DecodeSnapshot(EncodeSnapshot(m.Snapshot(), book))
	if err != nil || !hasBook {
		t.Fatalf("decode: %v (book %v)", err, hasBook)
	}
	if got.Digest() != m.Digest() || got.LastToken() != m.LastToken() {
		t.Fatalf("table changed: %s/%d, want %s/%d", got.Digest(), got.LastToken(), m.Digest(), m.LastToken())
	}
	if !reflect.DeepEqual(gotBook, book) {
		t.Fatalf("book %+v, want %+v", gotBook, book)
	}
	if len(gotBook.Bootstrap) != 3 || !reflect.DeepEqual(gotBook.Removed, []uint64{1}) {
		t.Fatalf("bootstrap or removed lost: %+v", gotBook)
	}
}

// A snapshot written before the book existed is the bare lock table.
func TestSnapshotWithoutBookDecodes(t *testing.T) {
	m := fsm.New()
	m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "k", LeaseMS: 1000})
	got, _, hasBook, err := DecodeSnapshot(m.Snapshot())
	if err != nil || hasBook || got.Digest() != m.Digest() {
		t.Fatalf("legacy snapshot: %v, book %v", err, hasBook)
	}
}

func TestCorruptSnapshotRefused(t *testing.T) {
	data := EncodeSnapshot(fsm.New().Snapshot(), NewBook(map[uint64]string{1: "a:1"}))
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if _, _, _, err := DecodeSnapshot(bad); err == nil {
			t.Fatalf("flipping byte %d went unnoticed", i)
		} else if !errors.Is(err, fsm.ErrCorrupt) {
			t.Fatalf("byte %d: %v does not wrap fsm.ErrCorrupt", i, err)
		}
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(EncodeSnapshot(fsm.New().Snapshot(), NewBook(map[uint64]string{1: "a:1", 2: "b:2"})))
	f.Add(fsm.New().Snapshot())
	f.Fuzz(func(t *testing.T, data []byte) {
		m, book, hasBook, err := DecodeSnapshot(data)
		if err != nil || !hasBook {
			return
		}
		again := EncodeSnapshot(m.Snapshot(), book)
		m2, book2, _, err := DecodeSnapshot(again)
		if err != nil || m2.Digest() != m.Digest() || !reflect.DeepEqual(book2, bookSorted(book)) {
			t.Fatalf("re-encoding changed the snapshot: %v", err)
		}
	})
}

func bookSorted(b Book) Book {
	c := b.clone()
	c.sort()
	return c
}

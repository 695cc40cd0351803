package member

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/snapchain"
)

// chainOf returns a chain of a base and two deltas of a table, with the
// table and book at its end.
func chainOf(t testing.TB) (data []byte, m *fsm.Machine, book Book) {
	t.Helper()
	m = fsm.New()
	book = NewBook(map[uint64]string{1: "a:1", 2: "b:2", 3: "c:3"})
	m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "a", LeaseMS: 1000})
	m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "b", LeaseMS: 1000})
	base := EncodeSnapshot(m.Snapshot(), book)
	m.FreezeChanges()
	parts := [][]byte{base}
	for _, step := range []func(){
		func() {
			m.Apply(fsm.Command{Op: fsm.OpRelease, Key: "a"})
			m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "c", LeaseMS: 5, Owner: "w"})
			book.put(Member{ID: 4, PeerAddr: "d:4"})
		},
		func() {
			m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "a", LeaseMS: 7})
			book.remove(2)
		},
	} {
		step()
		table, ch := m.FreezeChanges()
		var b bytes.Buffer
		if err := WriteSnapshotDelta(&b, table, ch, book, nil); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, b.Bytes())
	}
	return snapchain.Join(parts...), m, book
}

// A chain decodes to the table and book at its end: the base with every
// delta applied, the book of the last.
func TestSnapshotChainDecodesToItsEnd(t *testing.T) {
	data, m, book := chainOf(t)
	got, gotBook, hasBook, err := DecodeSnapshot(data)
	if err != nil || !hasBook {
		t.Fatalf("decode chain: %v (book %v)", err, hasBook)
	}
	if got.Digest() != m.Digest() || got.LastToken() != m.LastToken() || got.Len() != m.Len() {
		t.Fatalf("chain restores %d locks digest %s, want %d %s", got.Len(), got.Digest(), m.Len(), m.Digest())
	}
	if !reflect.DeepEqual(gotBook, bookSorted(book)) {
		t.Fatalf("book %+v, want %+v", gotBook, book)
	}
}

// A chain with any byte flipped, a delta missing, deltas out of order, a
// delta where the base should be or a chain inside a chain is refused.
func TestCorruptSnapshotChainRefused(t *testing.T) {
	data, _, _ := chainOf(t)
	parts, err := snapchain.Split(data)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{
		"delta missing":   snapchain.Join(parts[0], parts[2]),
		"out of order":    snapchain.Join(parts[0], parts[2], parts[1]),
		"delta as base":   snapchain.Join(parts[1], parts[2]),
		"base as delta":   snapchain.Join(parts[0], parts[0]),
		"chain in chain":  snapchain.Join(data, parts[1]),
		"no part":         []byte(snapchain.Magic),
		"truncated chain": data[:len(data)-3],
	}
	for i := len(snapchain.Magic); i < len(data); i += 7 {
		b := bytes.Clone(data)
		b[i] ^= 0x40
		bad["byte flipped"] = b
		if _, _, _, err := DecodeSnapshot(b); err == nil {
			t.Fatalf("flipping byte %d went unnoticed", i)
		}
	}
	for name, b := range bad {
		if _, _, _, err := DecodeSnapshot(b); !errors.Is(err, fsm.ErrCorrupt) {
			t.Errorf("%s: %v, want fsm.ErrCorrupt", name, err)
		}
	}
}

func FuzzDecodeSnapshotChain(f *testing.F) {
	data, _, _ := chainOf(f)
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, book, hasBook, err := DecodeSnapshot(data)
		if err != nil || !hasBook {
			return
		}
		m2, book2, _, err := DecodeSnapshot(EncodeSnapshot(m.Snapshot(), book))
		if err != nil || m2.Digest() != m.Digest() || !reflect.DeepEqual(book2, bookSorted(book)) {
			t.Fatalf("re-encoding changed the snapshot: %v", err)
		}
	})
}

// A compaction that absorbs one its driver dropped carries both's
// changes from the earlier's base, unless they add up to the table's
// size: then it writes the table.
func TestAbsorbKeepsTheEarlierBaseOrGivesUpTheDelta(t *testing.T) {
	m := fsm.New()
	for i := range 100 {
		m.Apply(fsm.Command{Op: fsm.OpGrant, Key: fmt.Sprintf("held/%03d", i), LeaseMS: 1})
	}
	m.FreezeChanges()
	compaction := func(index, base uint64) *Compaction {
		table, ch := m.FreezeChanges()
		return &Compaction{Index: index, Table: table, Changes: ch, Base: base}
	}
	m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "a", LeaseMS: 1})
	earlier := compaction(20, 10)
	m.Apply(fsm.Command{Op: fsm.OpGrant, Key: "b", LeaseMS: 1})
	later := compaction(30, 20)
	later.Absorb(earlier)
	if later.Base != 10 || later.Changes.Len() != 2 {
		t.Fatalf("absorbed: base %d, %d keys changed; want 10 and 2", later.Base, later.Changes.Len())
	}
	for i := range 100 {
		m.Apply(fsm.Command{Op: fsm.OpRelease, Key: fmt.Sprintf("held/%03d", i)})
	}
	big := compaction(40, 30)
	big.Absorb(later)
	if big.Changes != nil {
		t.Fatalf("changes of %d bytes on a table of %d kept as a delta", big.Changes.EncodedSize(), big.Table.EncodedSize())
	}
}

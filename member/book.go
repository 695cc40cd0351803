package member

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/memberstatus"
	"github.com/raftlock/raftlock/internal/snapchain"
)

// Member is one member as the cluster records it (memberstatus.Member:
// the client protocol's too).
type Member = memberstatus.Member

// Book is the replicated address book: every member's addresses, the ids
// removed (never reused: a member id names one data directory for the life
// of the cluster), and the configuration the cluster was bootstrapped with
// at index 0, which a joining member needs to replay the log from its
// start. It changes only when a configuration change applies, identically
// on every member, and travels in snapshots with the lock table.
type Book struct {
	Members   []Member `json:"members"`
	Removed   []uint64 `json:"removed,omitempty"`
	Bootstrap []Member `json:"bootstrap"`
}

// NewBook returns the book of a cluster bootstrapped with peers (id to
// peer address).
func NewBook(peers map[uint64]string) Book {
	var b Book
	for id, addr := range peers {
		b.Members = append(b.Members, Member{ID: id, PeerAddr: addr})
	}
	b.sort()
	b.Bootstrap = slices.Clone(b.Members)
	return b
}

func (b *Book) sort() {
	slices.SortFunc(b.Members, func(x, y Member) int { return cmpID(x.ID, y.ID) })
	slices.SortFunc(b.Bootstrap, func(x, y Member) int { return cmpID(x.ID, y.ID) })
	slices.Sort(b.Removed)
}

func cmpID(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Get returns the member with id.
func (b *Book) Get(id uint64) (Member, bool) {
	for _, m := range b.Members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// Peers returns id to peer address for every member.
func (b *Book) Peers() map[uint64]string {
	p := make(map[uint64]string, len(b.Members))
	for _, m := range b.Members {
		p[m.ID] = m.PeerAddr
	}
	return p
}

// BootstrapPeers returns id to peer address of the bootstrap configuration.
func (b *Book) BootstrapPeers() map[uint64]string {
	p := make(map[uint64]string, len(b.Bootstrap))
	for _, m := range b.Bootstrap {
		p[m.ID] = m.PeerAddr
	}
	return p
}

func (b *Book) put(m Member) {
	m.Role = ""
	for i := range b.Members {
		if b.Members[i].ID == m.ID {
			b.Members[i] = m
			return
		}
	}
	b.Members = append(b.Members, m)
	b.sort()
}

func (b *Book) remove(id uint64) {
	b.Members = slices.DeleteFunc(b.Members, func(m Member) bool { return m.ID == id })
	if !slices.Contains(b.Removed, id) {
		b.Removed = append(b.Removed, id)
		slices.Sort(b.Removed)
	}
}

func (b Book) clone() Book {
	return Book{Members: slices.Clone(b.Members), Removed: slices.Clone(b.Removed), Bootstrap: slices.Clone(b.Bootstrap)}
}

// Snapshot data: "RLM" and a format byte, the book as JSON (length
// prefixed), the lock table (fsm.Machine.Snapshot, which has its own
// checksum), and a CRC-32 of everything before it. Data that starts with
// the lock table's own magic is a snapshot from before the book existed.
//
// A delta segment (snapDeltaFormat) is the same with the table's delta
// (fsm.Frozen.WriteDelta) in place of the table: the book at its end and
// what changed in the table since the segment before it. A chain of
// segments (internal/snapchain: a whole one, then deltas) is snapshot data
// too: what a member whose store keeps its snapshot as a base and deltas
// restores from and sends.
const (
	snapMagic       = "RLM"
	snapFormat      = 1
	snapDeltaFormat = 2
)

// EncodeSnapshot encodes a snapshot's data: the lock table (as
// fsm.Machine.Snapshot encodes it) and the address book.
func EncodeSnapshot(table []byte, book Book) []byte {
	var b bytes.Buffer
	writeSnapshot(&b, snapFormat, book, func(w io.Writer) error { _, err := w.Write(table); return err }) // a bytes.Buffer does not fail
	return b.Bytes()
}

// WriteSnapshot streams the snapshot data of a frozen table and a book to
// w: the bytes EncodeSnapshot(table.Snapshot(), book) returns, without
// holding them. yield is passed on to Frozen.WriteSnapshot.
func WriteSnapshot(w io.Writer, table *fsm.Frozen, book Book, yield func()) error {
	return writeSnapshot(w, snapFormat, book, func(w io.Writer) error { return table.WriteSnapshot(w, yield) })
}

// WriteSnapshotDelta streams to w a delta segment: the book, and what
// changed in the table since the point ch starts at (fsm.Frozen.WriteDelta).
// Appended to a chain that ends at that point, it gives the frozen table.
func WriteSnapshotDelta(w io.Writer, table *fsm.Frozen, ch *fsm.Changes, book Book, yield func()) error {
	return writeSnapshot(w, snapDeltaFormat, book, func(w io.Writer) error { return table.WriteDelta(w, ch, yield) })
}

func writeSnapshot(w io.Writer, format byte, book Book, writeTable func(io.Writer) error) error {
	b := book.clone()
	b.sort()
	js, err := json.Marshal(b)
	if err != nil {
		panic(fmt.Sprintf("member: encode address book: %v", err)) // plain structs: cannot fail
	}
	crc := crc32.NewIEEE()
	mw := io.MultiWriter(w, crc)
	head := append([]byte(snapMagic), format)
	head = binary.AppendUvarint(head, uint64(len(js)))
	if _, err := mw.Write(append(head, js...)); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := writeTable(mw); err != nil {
		return err
	}
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

// DecodeSnapshot decodes snapshot data. Empty data is an empty table and
// no book (hasBook false), as is a lock table alone (an older format):
// the caller then knows the members from elsewhere (its --peers). A chain
// is its first segment with every delta after it applied in order.
func DecodeSnapshot(data []byte) (m *fsm.Machine, book Book, hasBook bool, err error) {
	if !snapchain.Is(data) {
		return decodeWhole(data)
	}
	parts, err := snapchain.Split(data)
	if err != nil {
		return nil, Book{}, false, fmt.Errorf("%w: %v", fsm.ErrCorrupt, err)
	}
	if snapchain.Is(parts[0]) {
		return nil, Book{}, false, fmt.Errorf("%w: a snapshot chain inside a chain", fsm.ErrCorrupt)
	}
	if m, book, hasBook, err = decodeWhole(parts[0]); err != nil {
		return nil, Book{}, false, err
	}
	for i, p := range parts[1:] {
		b, delta, err := openSegment(p, snapDeltaFormat)
		if err == nil {
			err = m.ApplyDelta(delta)
		}
		if err != nil {
			return nil, Book{}, false, fmt.Errorf("snapshot delta %d of %d: %w", i+1, len(parts)-1, err)
		}
		book, hasBook = b, true
	}
	return m, book, hasBook, nil
}

// decodeWhole decodes one whole snapshot (not a chain).
func decodeWhole(data []byte) (m *fsm.Machine, book Book, hasBook bool, err error) {
	if len(data) == 0 {
		return fsm.New(), Book{}, false, nil
	}
	if len(data) < len(snapMagic) || string(data[:len(snapMagic)]) != snapMagic {
		m, err := fsm.Restore(data)
		return m, Book{}, false, err
	}
	book, table, err := openSegment(data, snapFormat)
	if err != nil {
		return nil, Book{}, false, err
	}
	if m, err = fsm.Restore(table); err != nil {
		return nil, Book{}, false, err
	}
	return m, book, true, nil
}

// openSegment checks a segment's checksum and format and returns its book
// and the table's bytes (a snapshot or a delta, as format says).
func openSegment(data []byte, format byte) (book Book, table []byte, err error) {
	if len(data) < len(snapMagic)+1+4 || string(data[:len(snapMagic)]) != snapMagic {
		return Book{}, nil, fmt.Errorf("%w: snapshot truncated", fsm.ErrCorrupt)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return Book{}, nil, fmt.Errorf("%w: snapshot checksum mismatch", fsm.ErrCorrupt)
	}
	if body[len(snapMagic)] != format {
		return Book{}, nil, fmt.Errorf("%w: snapshot format %d, want %d", fsm.ErrCorrupt, body[len(snapMagic)], format)
	}
	rest := body[len(snapMagic)+1:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return Book{}, nil, fmt.Errorf("%w: bad address book length", fsm.ErrCorrupt)
	}
	if err := json.Unmarshal(rest[k:k+int(n)], &book); err != nil {
		return Book{}, nil, fmt.Errorf("%w: address book: %v", fsm.ErrCorrupt, err)
	}
	return book, rest[k+int(n):], nil
}

package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/raftlock/raftlock/internal/binread"
	"github.com/raftlock/raftlock/internal/lockrule"
)

// Limits enforced by the decoders (and by the node before it proposes);
// the key's and owner's are the lock vocabulary's (lockrule).
const (
	MaxKeyLen     = lockrule.MaxKeyLen
	MaxOwnerLen   = lockrule.MaxOwnerLen // bytes of a Grant's owner
	MaxBatch      = 4096                 // commands in one log entry
	MaxEntryBytes = 1 << 20              // encoded size of one log entry
	snapshotMagic = "RLS"
)

// Encoding versions. Version 2 added the Grant's owner, to entries and to
// snapshots; version 1 data (written before owners) still decodes, with
// no owners. Snapshot format 3 writes each key as the length it shares
// with the key before it and the rest (keys in sorted order share their
// prefixes: a million keys under "locks/orders/" shrink by that much on
// disk and on the wire); formats 1 and 2 still decode.
const (
	entryVersion     = 2
	entryVersionV1   = 1
	snapshotFormat   = 3
	snapshotFormatV2 = 2
	snapshotFormatV1 = 1
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("fsm: corrupt encoding")

// RequestID names the request that caused a command: the proposing node and
// a sequence number unique on that node. The leader uses it to match applied
// results to waiting requests.
type RequestID struct {
	Node uint64
	Seq  uint64
}

// Envelope is one command with its request id and an optional client tag
// (an operation id the harness can match against its history after a run).
type Envelope struct {
	ID  RequestID
	Tag uint64
	Cmd Command
}

// EncodeBatch encodes envelopes as the data of one log entry.
func EncodeBatch(envs []Envelope) []byte {
	size := 2 + binary.MaxVarintLen64
	for i := range envs {
		size += 1 + 6*binary.MaxVarintLen64 + len(envs[i].Cmd.Key) + len(envs[i].Cmd.Owner)
	}
	b := make([]byte, 0, size)
	return AppendBatch(b, envs)
}

// AppendBatch appends the encoding of envs to b.
func AppendBatch(b []byte, envs []Envelope) []byte {
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, uint64(len(envs)))
	for _, e := range envs {
		b = binary.AppendUvarint(b, e.ID.Node)
		b = binary.AppendUvarint(b, e.ID.Seq)
		b = binary.AppendUvarint(b, e.Tag)
		b = appendCommand(b, e.Cmd)
	}
	return b
}

func appendCommand(b []byte, c Command) []byte {
	b = append(b, byte(c.Op))
	b = binary.AppendUvarint(b, uint64(len(c.Key)))
	b = append(b, c.Key...)
	switch c.Op {
	case OpGrant:
		b = binary.AppendUvarint(b, c.LeaseMS)
		b = binary.AppendUvarint(b, uint64(len(c.Owner)))
		b = append(b, c.Owner...)
	case OpExpire:
		b = binary.AppendUvarint(b, c.Token)
	case OpRenew:
		b = binary.AppendUvarint(b, c.Token)
		b = binary.AppendUvarint(b, c.LeaseMS)
	}
	return b
}

// DecodeBatch decodes one log entry's data. It rejects truncated, oversized,
// trailing or unknown input with an error wrapping ErrCorrupt.
func DecodeBatch(data []byte) ([]Envelope, error) {
	if len(data) > MaxEntryBytes {
		return nil, fmt.Errorf("%w: entry of %d bytes exceeds %d", ErrCorrupt, len(data), MaxEntryBytes)
	}
	r := newReader(data, false)
	v := r.Byte()
	if r.Err == nil && v != entryVersion && v != entryVersionV1 {
		return nil, fmt.Errorf("%w: unknown entry version %d", ErrCorrupt, v)
	}
	r.owners = v >= 2
	n := r.Uvarint()
	if r.Err == nil && n > MaxBatch {
		return nil, fmt.Errorf("%w: batch of %d commands exceeds %d", ErrCorrupt, n, MaxBatch)
	}
	if r.Err != nil {
		return nil, r.Err
	}
	envs := make([]Envelope, 0, n)
	for i := uint64(0); i < n; i++ {
		var e Envelope
		e.ID.Node = r.Uvarint()
		e.ID.Seq = r.Uvarint()
		e.Tag = r.Uvarint()
		e.Cmd = r.command()
		if r.Err != nil {
			return nil, fmt.Errorf("command %d: %w", i, r.Err)
		}
		envs = append(envs, e)
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return envs, nil
}

// reader decodes with a sticky error (binread), so a truncated input can
// never index past the end of the buffer.
type reader struct {
	binread.Reader
	// owners: the encoding's Grants (or snapshot locks) carry an owner
	// (version 2 on).
	owners bool
}

// newReader reads data, failing with ErrCorrupt.
func newReader(data []byte, owners bool) reader {
	return reader{Reader: binread.Reader{Buf: data, Malformed: ErrCorrupt}, owners: owners}
}

func (r *reader) bytes(max int) []byte {
	n := r.Uvarint()
	if r.Err != nil {
		return nil
	}
	if n > uint64(max) {
		r.Fail("length %d exceeds %d", n, max)
		return nil
	}
	if uint64(len(r.Buf)) < n {
		r.Fail("truncated")
		return nil
	}
	b := r.Buf[:n]
	r.Buf = r.Buf[n:]
	return b
}

// prefixedKey reads key i of an ascending run that sumWriter.key wrote:
// the length of the prefix it shares with the key before it, which kb
// holds, then the rest. It returns the key in kb's memory.
func (r *reader) prefixedKey(i uint64, kb []byte) []byte {
	shared := r.Uvarint()
	if r.Err == nil && shared > uint64(len(kb)) {
		r.Fail("key %d shares %d bytes with a key of %d", i, shared, len(kb))
	}
	if r.Err == nil {
		kb = append(kb[:shared], r.bytes(MaxKeyLen-int(shared))...)
	}
	return kb
}

// owner reads an owner if the encoding has them.
func (r *reader) owner() string {
	if !r.owners {
		return ""
	}
	return string(r.bytes(MaxOwnerLen))
}

func (r *reader) command() Command {
	var c Command
	c.Op = Op(r.Byte())
	key := r.bytes(MaxKeyLen)
	if r.Err != nil {
		return c
	}
	if len(key) == 0 {
		r.Fail("empty key")
		return c
	}
	c.Key = string(key)
	switch c.Op {
	case OpGrant:
		c.LeaseMS = r.Uvarint()
		c.Owner = r.owner()
	case OpRelease:
	case OpExpire:
		c.Token = r.Uvarint()
	case OpRenew:
		c.Token = r.Uvarint()
		c.LeaseMS = r.Uvarint()
	default:
		r.Fail("unknown op %d", uint8(c.Op))
	}
	return c
}

// Snapshot encodes the whole table, keys in sorted order, with a checksum.
// Equal tables give equal bytes on every node. The caller must not change
// the table meanwhile; a Frozen copy encodes beside a member that goes on
// applying (Frozen.WriteSnapshot).
func (m *Machine) Snapshot() []byte {
	var b bytes.Buffer
	b.Grow(int(m.EncodedSize()) + m.Len()*binary.MaxVarintLen64)
	m.writeSnapshot(&b, nil) // a bytes.Buffer does not fail
	return b.Bytes()
}

// writeSnapshot streams the encoding Snapshot returns to w: the header,
// every lock in key order, then the CRC-32 of all of it. The keys are
// sorted shard by shard and merged, and yield (when not nil) is called
// between shards and every few hundred locks merged, so that a goroutine
// encoding a million locks lets the others run often.
func (m *Machine) writeSnapshot(w io.Writer, yield func()) error {
	sw := newSumWriter(w, snapshotMagic, snapshotFormat)
	sw.uvarint(m.lastToken)
	sw.uvarint(uint64(m.locks.n))
	m.locks.eachSorted(yield, "", true, func(key string, l Lock) bool {
		sw.key(key)
		sw.lock(l)
		return true
	})
	return sw.finish("write snapshot")
}

// sumWriter writes a snapshot or a delta: a header (magic and format),
// then fields buffered and summed, the CRC-32 of all of it appended by
// finish. Keys are written in ascending order, each as the length of the
// prefix it shares with the one before and the rest of it.
type sumWriter struct {
	w    io.Writer
	crc  hash.Hash32
	bw   *bufio.Writer
	vb   [binary.MaxVarintLen64]byte
	prev string // the key written last
}

func newSumWriter(w io.Writer, magic string, format byte) *sumWriter {
	crc := crc32.NewIEEE()
	sw := &sumWriter{w: w, crc: crc, bw: bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10)}
	sw.bw.WriteString(magic)
	sw.bw.WriteByte(format)
	return sw
}

// The writes are buffered: an error is kept by the bufio.Writer and
// returned by finish.
func (sw *sumWriter) uvarint(v uint64) { sw.bw.Write(binary.AppendUvarint(sw.vb[:0], v)) }

func (sw *sumWriter) key(key string) {
	shared := sharedPrefix(sw.prev, key)
	sw.uvarint(uint64(shared))
	sw.uvarint(uint64(len(key) - shared))
	sw.bw.WriteString(key[shared:])
	sw.prev = key
}

func (sw *sumWriter) lock(l Lock) {
	sw.uvarint(l.Token)
	sw.uvarint(l.LeaseMS)
	sw.uvarint(uint64(len(l.Owner)))
	sw.bw.WriteString(l.Owner)
}

// finish flushes what is buffered and appends the checksum; what names
// the write in its error.
func (sw *sumWriter) finish(what string) error {
	if err := sw.bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := sw.w.Write(binary.BigEndian.AppendUint32(nil, sw.crc.Sum32())); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// sharedPrefix returns the length of the longest common prefix of a and b.
func sharedPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i+8 <= n && a[i:i+8] == b[i:i+8] {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// Frozen is a read-only copy of a lock table as it was when Freeze was
// called. It is safe to use from another goroutine than the Machine's.
type Frozen struct{ m Machine }

// Freeze returns the table as it is now, in O(1024) whatever its size:
// the copy shares the table's memory, and the Machine copies a part of it
// only when it next writes there. Encoding the copy (Frozen.Snapshot)
// can then run off the member's goroutine while it goes on applying.
func (m *Machine) Freeze() *Frozen {
	return &Frozen{m: Machine{locks: m.locks.freeze(), lastToken: m.lastToken, sum: m.sum}}
}

// Snapshot encodes the frozen table as Machine.Snapshot does.
func (f *Frozen) Snapshot() []byte { return f.m.Snapshot() }

// WriteSnapshot streams the bytes Snapshot returns to w, without holding
// them, calling yield (when not nil) often: for the goroutine that writes
// a big table's snapshot beside the member's.
func (f *Frozen) WriteSnapshot(w io.Writer, yield func()) error { return f.m.writeSnapshot(w, yield) }

// EncodedSize bounds the bytes of the frozen table's snapshot from above
// (Machine.EncodedSize).
func (f *Frozen) EncodedSize() uint64 { return f.m.EncodedSize() }

// Len returns the number of locks in the frozen table.
func (f *Frozen) Len() int { return f.m.Len() }

// LastToken returns the frozen table's last token.
func (f *Frozen) LastToken() uint64 { return f.m.lastToken }

// Get returns the lock the frozen table holds on key, if any.
func (f *Frozen) Get(key string) (Lock, bool) { return f.m.Get(key) }

// Digest returns the frozen table's digest (Machine.Digest).
func (f *Frozen) Digest() string { return f.m.Digest() }

// Restore decodes a Snapshot. It rejects corrupt input, including a lock
// whose token is above the recorded last token or a key listed twice.
func Restore(data []byte) (*Machine, error) {
	if len(data) < len(snapshotMagic)+1+4 {
		return nil, fmt.Errorf("%w: snapshot truncated", ErrCorrupt)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: snapshot checksum mismatch", ErrCorrupt)
	}
	format := body[len(snapshotMagic)]
	if string(body[:len(snapshotMagic)]) != snapshotMagic || format < snapshotFormatV1 || format > snapshotFormat {
		return nil, fmt.Errorf("%w: not a version %d to %d snapshot", ErrCorrupt, snapshotFormatV1, snapshotFormat)
	}
	r := newReader(body[len(snapshotMagic)+1:], format >= snapshotFormatV2)
	m := New()
	m.changes = nil // a restored table records changes from its end (forgetChanges below)
	m.lastToken = r.Uvarint()
	n := r.Uvarint()
	if r.Err == nil && n > uint64(len(r.Buf)) {
		r.Fail("lock count %d exceeds input", n)
	}
	prev := ""
	var kb []byte // format 3: the key, its prefix shared with prev
	for i := uint64(0); i < n && r.Err == nil; i++ {
		var key string
		if format >= 3 {
			kb = r.prefixedKey(i, kb)
			key = string(kb)
		} else {
			key = string(r.bytes(MaxKeyLen))
		}
		tok := r.Uvarint()
		lease := r.Uvarint()
		owner := r.owner()
		switch {
		case r.Err != nil:
		case key == "" || (i > 0 && key <= prev):
			r.Fail("keys not strictly sorted at %d", i)
		case tok == 0 || tok > m.lastToken:
			r.Fail("token %d outside 1..%d", tok, m.lastToken)
		}
		prev = key
		m.put(key, Lock{Token: tok, LeaseMS: lease, Owner: owner})
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	m.forgetChanges()
	return m, nil
}

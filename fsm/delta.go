package fsm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"slices"
	"strings"
	"unsafe"

	"github.com/raftlock/raftlock/internal/invariants"
)

// A delta is what changed in a table between two of its snapshots: the
// lock of every key granted, renewed or changed since the first, and the
// removal of every key the first held that the second does not. Applied to
// a table restored from the first snapshot (ApplyDelta), it gives the
// table of the second, digest and last token included. A member with a
// million locks then stores a snapshot that costs what its clients
// changed, not its whole table.
//
// Encoding: deltaMagic, deltaFormat, the table's state at the delta's
// start and at its end (tableState: digest sum lanes, last token, lock
// count, as uvarints), uvarint count, then per key in sorted order the length it shares with the key before
// it, the rest of the key, and either deltaRemoved or deltaPut followed by
// the token, the lease and the owner; then the CRC-32 of all of it.
const (
	deltaMagic   = "RLD"
	deltaFormat  = 1
	deltaRemoved = 0
	deltaPut     = 1
)

// Changes is the set of keys a table changed since a point: for each key,
// whether the table held it at that point and after its last change. It
// grows with the keys changed, never with the table. Like the table, it
// holds no pointers per key (the keys are copied into one arena, found by
// their hash): the collector never scans it, however many keys a fill
// changes between two snapshots (a map of a million cloned keys made a
// full collection take half a second).
type Changes struct {
	from  tableState // the table's at the point
	seed  maphash.Seed
	index map[uint64]int32 // a key's hash to its first entry
	list  []changed        // in the order of first changes
	arena []byte           // the keys, one after another
	bytes uint64           // the keys' lengths plus lockOverhead each: a bound on the delta's size
}

// changed is one key of Changes: where its bytes are in the arena, the
// next entry whose key has the same hash (-1: none), and what its changes
// did.
type changed struct {
	off, n int
	next   int32
	change
}

// change is what a key's changes did: held at the point (before) and after
// the last of them (now). A key held at neither end, granted and released
// between two snapshots, is left out of the delta without a look at the
// table, which at a million locks is a cache miss or two a key.
type change struct{ before, now bool }

// Len returns the number of keys changed.
func (c *Changes) Len() int {
	if c == nil {
		return 0
	}
	return len(c.list)
}

// EncodedSize estimates the bytes of a delta of these changes (owners
// left out).
func (c *Changes) EncodedSize() uint64 {
	if c == nil {
		return 0
	}
	return c.bytes
}

// key returns entry i's key as a view of the arena (valid while c is).
func (c *Changes) key(i int32) string {
	e := &c.list[i]
	if e.n == 0 {
		return ""
	}
	return unsafe.String(&c.arena[e.off], e.n)
}

// find returns the entry of key, or -1, with the key's hash.
func (c *Changes) find(key string) (int32, uint64) {
	if c.index == nil {
		c.seed, c.index = maphash.MakeSeed(), map[uint64]int32{}
	}
	h := maphash.String(c.seed, key)
	return c.lookup(key, h), h
}

// lookup returns the entry of key, whose hash is h, or -1: keys of one
// hash are chained.
func (c *Changes) lookup(key string, h uint64) int32 {
	i, ok := c.index[h]
	for ok && i >= 0 {
		if c.key(i) == key {
			return i
		}
		i = c.list[i].next
	}
	return -1
}

// add records key's first change, whose hash is h.
func (c *Changes) add(key string, h uint64, ch change) {
	next, ok := c.index[h]
	if !ok {
		next = -1
	}
	c.index[h] = int32(len(c.list))
	c.list = append(c.list, changed{off: len(c.arena), n: len(key), next: next, change: ch})
	c.arena = append(c.arena, key...) // key may point into the table's arena: copied
	c.bytes += uint64(len(key)) + lockOverhead
}

// Absorb makes c the changes since the point of earlier: c held what
// changed since earlier's end. earlier is used up.
func (c *Changes) Absorb(earlier *Changes) {
	if earlier == nil {
		return
	}
	for i := range earlier.list {
		k, e := earlier.key(int32(i)), earlier.list[i].change
		if j, h := c.find(k); j >= 0 {
			c.list[j].change = change{before: e.before, now: c.list[j].now} // held at earlier's point, and now
		} else {
			c.add(k, h, e) // unchanged since earlier's end
		}
	}
	c.from = earlier.from
	*earlier = Changes{}
}

// tableState sums a table up: two tables with equal states hold the same
// locks (up to a hash collision). A delta records the states it starts
// and ends at, so one applied to any other table than its own start, or
// with a change missing, is refused rather than restored.
type tableState struct {
	sum       digestSum
	lastToken uint64
	n         uint64
}

func (m *Machine) state() tableState {
	return tableState{sum: m.sum, lastToken: m.lastToken, n: uint64(m.locks.n)}
}

func (s tableState) append(b []byte) []byte {
	for _, v := range []uint64{s.sum.a, s.sum.b, s.lastToken, s.n} {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func (r *reader) tableState() tableState {
	return tableState{sum: digestSum{a: r.Uvarint(), b: r.Uvarint()}, lastToken: r.Uvarint(), n: r.Uvarint()}
}

// note records that key changed: held says whether the table held it just
// before, now whether it holds it after. What it held before counts from
// the key's first change since the point.
func (c *Changes) note(key string, held, now bool) {
	if i, h := c.find(key); i < 0 {
		c.add(key, h, change{before: held, now: now})
	} else {
		c.list[i].now = now
	}
}

// FreezeChanges is Freeze, with the keys changed since the last
// FreezeChanges (or since New, Restore or ApplyDelta): the frozen table
// writes the delta from that point to now (Frozen.WriteDelta). The
// Machine starts recording anew.
func (m *Machine) FreezeChanges() (*Frozen, *Changes) {
	ch := m.changes
	if ch == nil {
		ch = &Changes{}
	}
	m.forgetChanges()
	return m.Freeze(), ch
}

// ChangedSize is Changes.EncodedSize of the changes recorded since the
// last FreezeChanges.
func (m *Machine) ChangedSize() uint64 { return m.changes.EncodedSize() }

// forgetChanges starts recording anew: the state now is the point.
func (m *Machine) forgetChanges() { m.changes = &Changes{from: m.state()} }

// WriteDelta streams to w the delta from the point ch starts at to the
// frozen table, calling yield (when not nil) every few hundred keys. ch
// must be the changes FreezeChanges returned with f (or those absorbed
// into them): a key ch lacks is one the delta takes as unchanged.
func (f *Frozen) WriteDelta(w io.Writer, ch *Changes, yield func()) error {
	type keyChange struct {
		key  string
		held bool // at the delta's end
	}
	keys := make([]keyChange, 0, ch.Len())
	if ch != nil {
		for i, e := range ch.list {
			if e.before || e.now { // held at neither end: nothing to say
				keys = append(keys, keyChange{ch.key(int32(i)), e.now})
			}
		}
	}
	slices.SortFunc(keys, func(a, b keyChange) int { return strings.Compare(a.key, b.key) })
	sw := newSumWriter(w, deltaMagic, deltaFormat)
	var from tableState
	if ch != nil {
		from = ch.from
	}
	sw.bw.Write(from.append(nil))
	sw.bw.Write(f.m.state().append(nil))
	sw.uvarint(uint64(len(keys)))
	for i, kc := range keys {
		key := kc.key
		sw.key(key)
		l, ok := Lock{}, false
		if kc.held || invariants.Enabled {
			l, ok = f.m.Get(key)
		}
		if ok != kc.held {
			return fmt.Errorf("write snapshot delta: key %q held=%v in the table, %v in its changes", key, ok, kc.held)
		}
		if ok {
			sw.bw.WriteByte(deltaPut)
			sw.lock(l)
		} else {
			sw.bw.WriteByte(deltaRemoved)
		}
		if yield != nil && i%512 == 511 {
			yield()
		}
	}
	return sw.finish("write snapshot delta")
}

// applyChanges applies a delta's n changes, read from r, failing r at the
// first that is malformed or does not fit m.
func (m *Machine) applyChanges(r *reader, n uint64) {
	var kb []byte
	prev := ""
	for i := uint64(0); i < n && r.Err == nil; i++ {
		kb = r.prefixedKey(i, kb)
		key := string(kb)
		kind := r.Byte()
		if r.Err != nil {
			return
		}
		if key == "" || (i > 0 && key <= prev) {
			r.Fail("keys not strictly sorted at %d", i)
			return
		}
		prev = key
		p := m.locks.find(key)
		switch kind {
		case deltaRemoved:
			if p.slot < 0 {
				r.Fail("removes %q, which the table does not hold", key)
				return
			}
			m.delAt(p, key)
		case deltaPut:
			tok, lease, owner := r.Uvarint(), r.Uvarint(), r.owner()
			if r.Err == nil && (tok == 0 || tok > m.lastToken) {
				r.Fail("token %d outside 1..%d", tok, m.lastToken)
			}
			if r.Err == nil {
				m.putAt(p, key, Lock{Token: tok, LeaseMS: lease, Owner: owner})
			}
		default:
			r.Fail("unknown change %d", kind)
		}
	}
}

// IsDelta says whether data is in the encoding WriteDelta writes.
func IsDelta(data []byte) bool {
	return len(data) > len(deltaMagic) && string(data[:len(deltaMagic)]) == deltaMagic
}

// ApplyDelta applies a delta WriteDelta wrote to m, which must be the
// table at the delta's starting point. It rejects corrupt input, and a
// delta that does not fit m: a last token below m's, a lock whose token
// is above the delta's last token, a removal of a key m does not hold.
// On error m is left part-way and must not be used. After it m records
// changes from the state it reached.
func (m *Machine) ApplyDelta(data []byte) error {
	if len(data) < len(deltaMagic)+1+4 {
		return fmt.Errorf("%w: delta truncated", ErrCorrupt)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return fmt.Errorf("%w: delta checksum mismatch", ErrCorrupt)
	}
	if !IsDelta(body) || body[len(deltaMagic)] != deltaFormat {
		return fmt.Errorf("%w: not a format %d delta", ErrCorrupt, deltaFormat)
	}
	r := newReader(body[len(deltaMagic)+1:], true)
	from, to := r.tableState(), r.tableState()
	n := r.Uvarint()
	switch {
	case r.Err != nil:
	case from != m.state():
		r.Fail("the delta starts at another table (%d locks, last token %d) than this one (%d, %d)", from.n, from.lastToken, m.locks.n, m.lastToken)
	case to.lastToken < m.lastToken:
		r.Fail("last token %d below the table's %d", to.lastToken, m.lastToken)
	case n > uint64(len(r.Buf)):
		r.Fail("key count %d exceeds input", n)
	}
	if r.Err != nil {
		return r.Err
	}
	m.changes = nil // recorded anew from the delta's end (forgetChanges below)
	m.locks.bulk = true
	defer m.locks.sortBulk()
	m.lastToken = to.lastToken
	m.applyChanges(&r, n)
	if r.Err == nil && len(r.Buf) != 0 {
		r.Fail("%d trailing bytes", len(r.Buf))
	}
	if r.Err == nil && m.state() != to {
		r.Fail("the delta does not end at the table it was written from (%d locks, want %d)", m.locks.n, to.n)
	}
	if r.Err != nil {
		return r.Err
	}
	m.forgetChanges()
	return nil
}

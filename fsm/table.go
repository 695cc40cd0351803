package fsm

import (
	"hash/maphash"
	"slices"
	"strings"
	"unsafe"
)

// tableShards is how many parts the table is split into. Freezing the
// table (Machine.Freeze) shares every shard with the frozen copy; the
// first later write to a shard copies that shard's index alone (and the
// chunk of slots it writes: see shard), so no write ever copies the whole
// table and a snapshot of a million locks costs the member only a slice
// of pointers.
const tableShards = 1024

// table is the lock table: shards that are copied on write once a frozen
// copy shares them.
//
// A shard holds no pointer per lock. Its keys and owners are bytes in one
// arena, its locks are slots in chunks of slotChunkLen (one pointer per
// chunk), and its index is an array of bucket heads: every part is a
// pointer-free array, which the garbage collector allocates as such and
// never scans. A table of a million locks
// therefore adds almost nothing to a collection's marking (a map of
// strings to structs with strings made every cycle walk three pointers per
// lock), and the member's loop keeps its pace however big the table grows.
type table struct {
	seed   maphash.Seed
	shards []*shard
	n      int
	bytes  uint64 // the keys' and owners' lengths plus lockOverhead per lock
	// epoch is bumped by freeze; a shard from an older epoch may be
	// shared with a frozen copy and is copied before it is written.
	epoch uint64
	// hashOf, when set, replaces the seeded hash: a test makes keys
	// collide with it.
	hashOf func(string) uint64
	// bulk: new keys are appended to their shard's keys unsorted, and
	// sortBulk sorts the shards they went to. Applying a delta's keys,
	// which land all over the table, one sorted insert at a time cost
	// half a restart of a million locks in memmove.
	bulk bool
}

// lockOverhead estimates a lock's encoded bytes besides its key and
// owner: their lengths, the token and the lease as varints.
const lockOverhead = 9

func lockBytes(key string, l Lock) uint64 { return uint64(len(key)+len(l.Owner)) + lockOverhead }

// Handle names a held lock's place in its table (Machine.ApplyAt,
// Machine.Handle): it stays the lock's while the lock is held, across
// freezes and whatever else the table does, and may name another lock once
// this one is gone. Handles differ between members: they say nothing about
// the replicated state.
type Handle uint64

// A handle stores slot+1, so that 0 names no lock ("nothing changed").
func handleOf(shard int, slot int32) Handle {
	return Handle(uint64(shard)<<32 | uint64(uint32(slot+1)))
}

func (h Handle) parts() (shard int, slot int32) { return int(h >> 32), int32(uint32(h)) - 1 }

// shard is one part of the table.
//
// Its arena only grows: a record (a key, then its owner) is appended and
// never written again, and a removed one is left in place until the
// removed bytes are over half the arena, when the live records are copied
// to a new arena. A copy of the shard (writable) shares the arena: only
// the table's current shard ever appends, and a frozen shard never reads
// past its own length. The arena's bytes are thus immutable once written,
// and a key or an owner is read as a string that points into the arena
// (view) without copying.
//
// Its slots are in chunks that a copy shares too, and copies one at a
// time when it first writes there: the first write to a shard after a
// freeze copies its bucket heads and sorted keys (about 8 KB at a
// thousand locks a shard) and one chunk, not every slot and a map of
// every hash (about 90 KB, 90 MB a snapshot at a million locks, which made
// the member's collections, and so its tail latency, grow with the table).
type shard struct {
	epoch uint64
	// heads is the first slot of each bucket of hashes (-1: none), a
	// power of two long and at least as long as the used slots; the
	// slots of a bucket are chained by their next.
	heads  []int32
	chunks []*slotChunk
	// owned says which chunks this shard may write: the others are shared
	// with a frozen copy and copied first (writableSlot).
	owned  []bool
	nslots int32   // slots taken from the chunks, used or free
	free   []int32 // slots no lock uses
	arena  []byte
	dead   int     // arena bytes of records no slot uses
	keys   []int32 // the used slots in key order (unless unsorted)
	// unsorted: keys were appended in a bulk load and are not in key
	// order until the table's sortBulk.
	unsorted bool
}

// slotChunkLen is the slots of a chunk: 2 KB, a size class of its own.
const slotChunkLen = 64

type slotChunk [slotChunkLen]slot

// slot is one held lock, or a free place for one.
type slot struct {
	token   uint64
	leaseMS uint64
	off     uint32 // of the record in the arena: the key, then the owner
	// tag is the high half of the key's hash: its bucket, and in a chain
	// a key is compared only when its tag is the one looked for.
	tag      uint32
	next     int32 // the next slot of the bucket (-1: none)
	keyLen   uint16
	ownerLen uint8
	used     bool
}

// Keys and owners fit the slot's fields; the codec refuses longer ones.
var (
	_ [1<<16 - 1 - MaxKeyLen]struct{}
	_ [1<<8 - 1 - MaxOwnerLen]struct{}
)

// A slot is 32 bytes, so that a chunk is 2 KB.
var (
	_ [32 - unsafe.Sizeof(slot{})]struct{}
	_ [unsafe.Sizeof(slot{}) - 32]struct{}
)

func tagOf(h uint64) uint32 { return uint32(h >> 32) }

// compactMin is the removed bytes below which a shard's arena is not
// compacted, however small: compacting a few kilobytes saves nothing.
const compactMin = 4 << 10

func newTable() table { return table{seed: maphash.MakeSeed(), shards: make([]*shard, tableShards)} }

// hash places key: its shard is the hash modulo tableShards, and the
// hash's high half (the slot's tag) picks its bucket in the shard. The placement decides nothing anyone can observe
// (every output that lists keys sorts them), so it may differ between
// tables and processes; a seeded hash keeps keys chosen to collide from
// piling up in one shard.
func (t *table) hash(key string) uint64 {
	if t.hashOf != nil {
		return t.hashOf(key)
	}
	return maphash.String(t.seed, key)
}

func shardIndex(h uint64) int { return int(h % tableShards) }

// view returns n bytes of the arena from off as a string, without copying:
// the bytes are never written again (see shard).
func (s *shard) view(off uint32, n int) string {
	if n == 0 {
		return ""
	}
	return unsafe.String(&s.arena[off], n)
}

// slot returns slot i, to read.
func (s *shard) slot(i int32) *slot { return &s.chunks[i/slotChunkLen][i%slotChunkLen] }

// writableSlot returns slot i, to write: its chunk is copied first if a
// frozen copy shares it.
func (s *shard) writableSlot(i int32) *slot {
	c := i / slotChunkLen
	if !s.owned[c] {
		copied := *s.chunks[c]
		s.chunks[c], s.owned[c] = &copied, true
	}
	return &s.chunks[c][i%slotChunkLen]
}

// takeSlot returns a slot no lock uses: the last one freed, or a new one.
func (s *shard) takeSlot() int32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	i := s.nslots
	if int(i/slotChunkLen) == len(s.chunks) {
		s.chunks, s.owned = append(s.chunks, new(slotChunk)), append(s.owned, true)
	}
	s.nslots++
	return i
}

func (s *shard) bucket(tag uint32) int { return int(tag) & (len(s.heads) - 1) }

// growHeads doubles the buckets once the used slots would outnumber them,
// and chains every slot anew: O(shard), once the shard has doubled.
func (s *shard) growHeads() {
	if len(s.keys) < len(s.heads) {
		return
	}
	s.heads = make([]int32, max(8, 2*len(s.heads)))
	for b := range s.heads {
		s.heads[b] = -1
	}
	for _, i := range s.keys {
		sl := s.writableSlot(i)
		b := s.bucket(sl.tag)
		sl.next, s.heads[b] = s.heads[b], i
	}
}

func (s *shard) key(i int32) string {
	sl := s.slot(i)
	return s.view(sl.off, int(sl.keyLen))
}

func (s *shard) lock(i int32) Lock {
	sl := s.slot(i)
	return Lock{Token: sl.token, LeaseMS: sl.leaseMS, Owner: s.view(sl.off+uint32(sl.keyLen), int(sl.ownerLen))}
}

// find returns key's slot, or -1.
func (s *shard) find(h uint64, key string) int32 {
	if len(s.heads) == 0 {
		return -1
	}
	tag := tagOf(h)
	for i := s.heads[s.bucket(tag)]; i >= 0; {
		sl := s.slot(i)
		if sl.tag == tag && s.view(sl.off, int(sl.keyLen)) == key {
			return i
		}
		i = sl.next
	}
	return -1
}

// sortedPos returns where key is or would be in s.keys.
func (s *shard) sortedPos(key string) (int, bool) {
	return slices.BinarySearchFunc(s.keys, key, func(i int32, k string) int { return strings.Compare(s.key(i), k) })
}

// appendRecord writes key and owner at the arena's end and returns their
// offset.
func (s *shard) appendRecord(key, owner string) uint32 {
	off := uint32(len(s.arena))
	s.arena = append(s.arena, key...)
	s.arena = append(s.arena, owner...)
	return off
}

func (s *shard) recordLen(i int32) int { sl := s.slot(i); return int(sl.keyLen) + int(sl.ownerLen) }

// compact copies the live records to a new arena once the removed ones are
// over half of it: O(shard), after as many removals as the shard keeps.
func (s *shard) compact() {
	if s.dead < compactMin || 2*s.dead < len(s.arena) {
		return
	}
	arena := make([]byte, 0, len(s.arena)-s.dead)
	for _, i := range s.keys {
		sl := s.writableSlot(i)
		n := uint32(s.recordLen(i))
		off := uint32(len(arena))
		arena = append(arena, s.arena[sl.off:sl.off+n]...)
		sl.off = off
	}
	s.arena, s.dead = arena, 0
}

// place is where a key is or would go: its hash, its shard and its slot
// (-1 when the key is not held). A place found is good for one write
// (setAt, removeAt) before any other: a command hashes its key and looks
// it up once.
type place struct {
	hash  uint64
	shard int
	slot  int32
}

func (t *table) find(key string) place {
	h := t.hash(key)
	p := place{hash: h, shard: shardIndex(h), slot: -1}
	if s := t.shards[p.shard]; s != nil {
		p.slot = s.find(h, key)
	}
	return p
}

// lockAt returns the lock at p, which must be held.
func (t *table) lockAt(p place) Lock { return t.shards[p.shard].lock(p.slot) }

func (t *table) get(key string) (Lock, bool) {
	p := t.find(key)
	if p.slot < 0 {
		return Lock{}, false
	}
	return t.lockAt(p), true
}

// handle returns key's handle, if it is held.
func (t *table) handle(key string) (Handle, bool) {
	h := t.hash(key)
	si := shardIndex(h)
	s := t.shards[si]
	if s == nil {
		return 0, false
	}
	i := s.find(h, key)
	if i < 0 {
		return 0, false
	}
	return handleOf(si, i), true
}

// at returns the lock named by h, if h names one.
func (t *table) at(h Handle) (string, Lock, bool) {
	si, i := h.parts()
	if si >= len(t.shards) || t.shards[si] == nil {
		return "", Lock{}, false
	}
	s := t.shards[si]
	if i < 0 || i >= s.nslots || !s.slot(i).used {
		return "", Lock{}, false
	}
	return s.key(i), s.lock(i), true
}

// writable returns shard si, copied first if a frozen copy shares it.
func (t *table) writable(si int) *shard {
	s := t.shards[si]
	switch {
	case s == nil:
		s = &shard{epoch: t.epoch}
		t.shards[si] = s
	case s.epoch != t.epoch:
		s = &shard{
			epoch:  t.epoch,
			heads:  slices.Clone(s.heads),
			chunks: slices.Clone(s.chunks),
			owned:  make([]bool, len(s.chunks)), // every chunk shared
			nslots: s.nslots,
			free:   slices.Clone(s.free),
			// Shared: the copy appends past the frozen shard's length,
			// where the frozen shard never reads, and s never appends
			// again (frozen tables are read only).
			arena:    s.arena,
			dead:     s.dead,
			keys:     slices.Clone(s.keys),
			unsorted: s.unsorted,
		}
		t.shards[si] = s
	}
	return s
}

// sortBulk ends a bulk load: every shard's keys are in key order again.
func (t *table) sortBulk() {
	t.bulk = false
	for _, s := range t.shards {
		if s != nil && s.unsorted {
			slices.SortFunc(s.keys, func(a, b int32) int { return strings.Compare(s.key(a), s.key(b)) })
			s.unsorted = false
		}
	}
}

// set stores key's lock and returns its handle.
func (t *table) set(key string, l Lock) Handle { return t.setAt(t.find(key), key, l) }

// setAt stores key's lock at p, found for key, and returns its handle.
// (Copying the shard first keeps its slots where they were.)
func (t *table) setAt(p place, key string, l Lock) Handle {
	h, si := p.hash, p.shard
	s := t.writable(si)
	if i := p.slot; i >= 0 {
		sl := s.writableSlot(i)
		t.bytes -= uint64(s.recordLen(i)) + lockOverhead
		if s.view(sl.off+uint32(sl.keyLen), int(sl.ownerLen)) != l.Owner {
			s.dead += s.recordLen(i)
			sl.off, sl.ownerLen = s.appendRecord(key, l.Owner), uint8(len(l.Owner))
		}
		sl.token, sl.leaseMS = l.Token, l.LeaseMS
		t.bytes += lockBytes(key, l)
		s.compact()
		return handleOf(si, i)
	}
	s.growHeads()
	i, tag := s.takeSlot(), tagOf(h)
	b := s.bucket(tag)
	*s.writableSlot(i) = slot{
		token: l.Token, leaseMS: l.LeaseMS,
		off: s.appendRecord(key, l.Owner), keyLen: uint16(len(key)), ownerLen: uint8(len(l.Owner)),
		tag: tag, next: s.heads[b], used: true,
	}
	s.heads[b] = i
	if t.bulk {
		s.keys, s.unsorted = append(s.keys, i), true
	} else {
		pos, _ := s.sortedPos(key)
		s.keys = slices.Insert(s.keys, pos, i)
	}
	t.n++
	t.bytes += lockBytes(key, l)
	return handleOf(si, i)
}

// remove deletes key's lock and returns the handle it had.
func (t *table) remove(key string) (Handle, bool) {
	p := t.find(key)
	if p.slot < 0 {
		return 0, false
	}
	return t.removeAt(p, key), true
}

// removeAt deletes the lock at p, found held for key, and returns its
// handle.
func (t *table) removeAt(p place, key string) Handle {
	si, i := p.shard, p.slot
	s := t.writable(si)
	// Unlink i from its bucket's chain.
	next := s.slot(i).next
	if b := s.bucket(tagOf(p.hash)); s.heads[b] == i {
		s.heads[b] = next
	} else {
		prev := s.heads[b]
		for s.slot(prev).next != i {
			prev = s.slot(prev).next
		}
		s.writableSlot(prev).next = next
	}
	if s.unsorted {
		if pos := slices.Index(s.keys, i); pos >= 0 {
			s.keys = slices.Delete(s.keys, pos, pos+1)
		}
	} else if pos, found := s.sortedPos(key); found {
		s.keys = slices.Delete(s.keys, pos, pos+1)
	}
	n := s.recordLen(i)
	s.dead += n
	*s.writableSlot(i) = slot{next: -1}
	s.free = append(s.free, i)
	t.n--
	t.bytes -= uint64(n) + lockOverhead
	s.compact()
	return handleOf(si, i)
}

// freeze returns a copy of the table that later writes to t never change.
func (t *table) freeze() table {
	t.epoch++
	return table{seed: t.seed, shards: slices.Clone(t.shards), n: t.n, bytes: t.bytes, epoch: t.epoch - 1, hashOf: t.hashOf}
}

// each calls f for every lock, in no particular order.
func (t *table) each(f func(h Handle, l Lock)) {
	for si, s := range t.shards {
		if s == nil {
			continue
		}
		for _, i := range s.keys {
			f(handleOf(si, i), s.lock(i))
		}
	}
}

func (t *table) sortedKeys() []string {
	keys := make([]string, 0, t.n)
	t.eachSorted(nil, "", true, func(k string, _ Lock) bool { keys = append(keys, strings.Clone(k)); return true })
	return keys
}

// eachSorted calls f for every lock whose key is from or above (with
// inclusive, from itself too), in key order, until f returns false: the
// shards' sorted keys are merged. yield, when not nil, is called every few
// hundred locks. The key and owner f gets point into the table's memory;
// a caller that keeps many of them should copy them (strings.Clone).
func (t *table) eachSorted(yield func(), from string, inclusive bool, f func(key string, l Lock) bool) {
	runs := make([]run, 0, len(t.shards))
	for _, s := range t.shards {
		if s == nil {
			continue
		}
		i, found := s.sortedPos(from)
		if found && !inclusive {
			i++
		}
		if i < len(s.keys) {
			runs = append(runs, run{s: s, i: i, key: s.key(s.keys[i])})
		}
	}
	m := newMerge(runs)
	for n := 1; ; n++ {
		r := m.min()
		if r == nil {
			return
		}
		if !f(r.key, r.s.lock(r.s.keys[r.i])) {
			return
		}
		if r.i++; r.i < len(r.s.keys) {
			r.key = r.s.key(r.s.keys[r.i])
		} else {
			r.s = nil
		}
		m.replay()
		if yield != nil && n%512 == 0 {
			yield()
		}
	}
}

// run is a shard's sorted keys from i on, with the key at i read out
// (the merge compares it about ten times). A run with s nil is used up.
type run struct {
	s   *shard
	i   int
	key string
}

// before says whether run a's key comes before run b's; a used-up run
// comes after every other.
func before(a, b *run) bool {
	if a.s == nil || b.s == nil {
		return b.s == nil && a.s != nil
	}
	return a.key < b.key
}

// merge is a tournament (loser) tree over runs: each inner node keeps the
// run that lost the match there, and tree[0] the overall winner. Taking
// the next key replays only the winner's path to the root, one comparison
// per level, half what a binary heap's sift-down costs: with a million
// locks of keys sharing long prefixes, the comparisons were most of a
// snapshot's time.
type merge struct {
	runs []run
	tree []int // tree[0]: the winner; tree[1:]: the loser at each inner node
}

func newMerge(runs []run) *merge {
	m := &merge{runs: runs, tree: make([]int, max(len(runs), 1))}
	if len(runs) == 0 {
		return m
	}
	// Leaves are runs at positions len(runs)+r of an implicit tree; play
	// every match bottom-up, keeping the winners, then store the losers.
	k := len(runs)
	winners := make([]int, 2*k)
	for r := range k {
		winners[k+r] = r
	}
	for node := k - 1; node >= 1; node-- {
		a, b := winners[2*node], winners[2*node+1]
		if before(&runs[b], &runs[a]) {
			a, b = b, a
		}
		winners[node], m.tree[node] = a, b
	}
	m.tree[0] = winners[1] // with one run, its leaf: winners[1] is run 0
	return m
}

// min returns the run holding the smallest key, or nil when all are used up.
func (m *merge) min() *run {
	if len(m.runs) == 0 {
		return nil
	}
	if r := &m.runs[m.tree[0]]; r.s != nil {
		return r
	}
	return nil
}

// replay restores the tree after the winner's run moved to its next key.
func (m *merge) replay() {
	k := len(m.runs)
	w := m.tree[0]
	for node := (k + w) / 2; node >= 1; node /= 2 {
		if l := m.tree[node]; before(&m.runs[l], &m.runs[w]) {
			m.tree[node], w = w, l
		}
	}
	m.tree[0] = w
}

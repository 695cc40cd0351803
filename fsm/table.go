package fsm

import (
	"hash/maphash"
	"maps"
	"slices"
	"strings"
)

// tableShards is how many maps the table is split into. Freezing the
// table (Machine.Freeze) shares every shard with the frozen copy; the
// first later write to a shard copies that shard alone, about n/1024
// locks, so no write ever copies the whole table and a snapshot of a
// million locks costs the member only a slice of pointers.
const tableShards = 1024

// table is the lock table: a map split into shards that are copied on
// write once a frozen copy shares them.
type table struct {
	seed   maphash.Seed
	shards []*shard
	n      int
	bytes  uint64 // the keys' lengths plus lockOverhead per lock
	// epoch is bumped by freeze; a shard from an older epoch may be
	// shared with a frozen copy and is copied before it is written.
	epoch uint64
}

// lockOverhead estimates a lock's encoded bytes besides its key: the key
// length, token and lease as varints.
const lockOverhead = 8

type shard struct {
	epoch uint64
	locks map[string]Lock
}

func newTable() table { return table{seed: maphash.MakeSeed(), shards: make([]*shard, tableShards)} }

// shardOf places key in a shard. The placement decides nothing anyone can
// observe (every output that lists keys sorts them), so it may differ
// between tables and processes; a seeded hash keeps keys chosen to
// collide from piling up in one shard.
func (t *table) shardOf(key string) int {
	return int(maphash.String(t.seed, key) % tableShards)
}

func (t *table) get(key string) (Lock, bool) {
	s := t.shards[t.shardOf(key)]
	if s == nil {
		return Lock{}, false
	}
	l, ok := s.locks[key]
	return l, ok
}

// writable returns key's shard, copied first if a frozen copy shares it.
func (t *table) writable(key string) *shard {
	i := t.shardOf(key)
	s := t.shards[i]
	switch {
	case s == nil:
		s = &shard{epoch: t.epoch, locks: make(map[string]Lock)}
		t.shards[i] = s
	case s.epoch != t.epoch:
		s = &shard{epoch: t.epoch, locks: maps.Clone(s.locks)}
		t.shards[i] = s
	}
	return s
}

func (t *table) set(key string, l Lock) {
	s := t.writable(key)
	if _, ok := s.locks[key]; !ok {
		t.n++
		t.bytes += uint64(len(key)) + lockOverhead
	}
	s.locks[key] = l
}

func (t *table) remove(key string) {
	if _, ok := t.get(key); !ok {
		return
	}
	delete(t.writable(key).locks, key)
	t.n--
	t.bytes -= uint64(len(key)) + lockOverhead
}

// freeze returns a copy of the table that later writes to t never change.
func (t *table) freeze() table {
	t.epoch++
	return table{seed: t.seed, shards: slices.Clone(t.shards), n: t.n, bytes: t.bytes, epoch: t.epoch - 1}
}

func (t *table) each(f func(key string, l Lock)) {
	for _, s := range t.shards {
		if s == nil {
			continue
		}
		for k, l := range s.locks {
			f(k, l)
		}
	}
}

func (t *table) sortedKeys() []string {
	keys := make([]string, 0, t.n)
	t.each(func(k string, _ Lock) { keys = append(keys, k) })
	slices.Sort(keys)
	return keys
}

type entry struct {
	key  string
	lock Lock
}

func cmpEntry(a, b entry) int { return strings.Compare(a.key, b.key) }

// eachSorted calls f for every lock in key order: each shard is sorted on
// its own (yield, when not nil, is called after each), then the sorted
// shards are merged.
func (t *table) eachSorted(yield func(), f func(key string, l Lock)) {
	runs := make(runHeap, 0, len(t.shards))
	for _, s := range t.shards {
		if s == nil || len(s.locks) == 0 {
			continue
		}
		es := make([]entry, 0, len(s.locks))
		for k, l := range s.locks {
			es = append(es, entry{k, l})
		}
		slices.SortFunc(es, cmpEntry)
		runs = append(runs, es)
		if yield != nil {
			yield()
		}
	}
	for i := len(runs)/2 - 1; i >= 0; i-- {
		runs.down(i)
	}
	for len(runs) > 0 {
		e := runs[0][0]
		f(e.key, e.lock)
		if runs[0] = runs[0][1:]; len(runs[0]) == 0 {
			last := len(runs) - 1
			runs[0], runs = runs[last], runs[:last]
		}
		runs.down(0)
	}
}

// runHeap is sorted runs of locks, a min-heap by their first key (its
// own sift-down: container/heap's interface calls doubled the merge).
type runHeap [][]entry

func (h runHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && h[r][0].key < h[l][0].key {
			c = r
		}
		if h[i][0].key <= h[c][0].key {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

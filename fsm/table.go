package fsm

import (
	"hash/maphash"
	"maps"
	"slices"
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
	bytes  uint64 // the keys' and owners' lengths plus lockOverhead per lock
	// epoch is bumped by freeze; a shard from an older epoch may be
	// shared with a frozen copy and is copied before it is written.
	epoch uint64
}

// lockOverhead estimates a lock's encoded bytes besides its key and
// owner: their lengths, the token and the lease as varints.
const lockOverhead = 9

func lockBytes(key string, l Lock) uint64 { return uint64(len(key)+len(l.Owner)) + lockOverhead }

// shard is one part of the table: its locks, and their keys in sorted
// order, so that a listing from any key on (Machine.List) and a snapshot
// (eachSorted) merge 1,024 sorted runs instead of sorting the table. Keeping
// keys sorted costs an insert a copy of about n/2048 string headers.
type shard struct {
	epoch uint64
	locks map[string]Lock
	keys  []string
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
		s = &shard{epoch: t.epoch, locks: maps.Clone(s.locks), keys: slices.Clone(s.keys)}
		t.shards[i] = s
	}
	return s
}

func (t *table) set(key string, l Lock) {
	s := t.writable(key)
	if old, ok := s.locks[key]; ok {
		t.bytes -= lockBytes(key, old)
	} else {
		t.n++
		i, _ := slices.BinarySearch(s.keys, key)
		s.keys = slices.Insert(s.keys, i, key)
	}
	t.bytes += lockBytes(key, l)
	s.locks[key] = l
}

func (t *table) remove(key string) {
	old, ok := t.get(key)
	if !ok {
		return
	}
	s := t.writable(key)
	delete(s.locks, key)
	if i, found := slices.BinarySearch(s.keys, key); found {
		s.keys = slices.Delete(s.keys, i, i+1)
	}
	t.n--
	t.bytes -= lockBytes(key, old)
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
	t.eachSorted(nil, "", true, func(k string, _ Lock) bool { keys = append(keys, k); return true })
	return keys
}

// eachSorted calls f for every lock whose key is from or above (with
// inclusive, from itself too), in key order, until f returns false: the
// shards' sorted keys are merged. yield, when not nil, is called every few
// hundred locks.
func (t *table) eachSorted(yield func(), from string, inclusive bool, f func(key string, l Lock) bool) {
	runs := make(runHeap, 0, len(t.shards))
	for _, s := range t.shards {
		if s == nil {
			continue
		}
		i, found := slices.BinarySearch(s.keys, from)
		if found && !inclusive {
			i++
		}
		if i < len(s.keys) {
			runs = append(runs, run{s, i})
		}
	}
	for i := len(runs)/2 - 1; i >= 0; i-- {
		runs.down(i)
	}
	for n := 1; len(runs) > 0; n++ {
		r := &runs[0]
		key := r.s.keys[r.i]
		if !f(key, r.s.locks[key]) {
			return
		}
		if r.i++; r.i == len(r.s.keys) {
			last := len(runs) - 1
			runs[0], runs = runs[last], runs[:last]
		}
		runs.down(0)
		if yield != nil && n%512 == 0 {
			yield()
		}
	}
}

// run is a shard's sorted keys from i on.
type run struct {
	s *shard
	i int
}

func (r run) key() string { return r.s.keys[r.i] }

// runHeap is sorted runs of locks, a min-heap by their first key (its
// own sift-down: container/heap's interface calls doubled the merge).
type runHeap []run

func (h runHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && h[r].key() < h[l].key() {
			c = r
		}
		if h[i].key() <= h[c].key() {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

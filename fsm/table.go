package fsm

import (
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

func newTable() table { return table{shards: make([]*shard, tableShards)} }

// shardOf is FNV-1a of the key: fixed, so every member and every replay
// places a key alike (the placement decides nothing observable, but a
// fixed one keeps runs comparable).
func shardOf(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % tableShards)
}

func (t *table) get(key string) (Lock, bool) {
	s := t.shards[shardOf(key)]
	if s == nil {
		return Lock{}, false
	}
	l, ok := s.locks[key]
	return l, ok
}

// writable returns key's shard, copied first if a frozen copy shares it.
func (t *table) writable(key string) *shard {
	i := shardOf(key)
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
	return table{shards: slices.Clone(t.shards), n: t.n, bytes: t.bytes, epoch: t.epoch - 1}
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

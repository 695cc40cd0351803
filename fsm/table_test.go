package fsm

import (
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/gccost"
)

// checkTable asserts that t holds exactly want, by every way the table is
// read: get, handle and at, each, the sorted merge, and its counts.
func checkTable(t *testing.T, tb *table, want map[string]Lock) {
	t.Helper()
	if tb.n != len(want) {
		t.Fatalf("table counts %d locks, want %d", tb.n, len(want))
	}
	var bytes uint64
	for k, l := range want {
		bytes += lockBytes(k, l)
		got, ok := tb.get(k)
		if !ok || got != l {
			t.Fatalf("get(%q) = %+v %v, want %+v", k, got, ok, l)
		}
		h, ok := tb.handle(k)
		if !ok {
			t.Fatalf("handle(%q) not found", k)
		}
		if hk, hl, ok := tb.at(h); !ok || hk != k || hl != l {
			t.Fatalf("at(handle(%q)) = %q %+v %v", k, hk, hl, ok)
		}
	}
	if tb.bytes != bytes {
		t.Fatalf("table counts %d bytes, want %d", tb.bytes, bytes)
	}
	seen := map[string]Lock{}
	tb.each(func(h Handle, l Lock) {
		k, hl, ok := tb.at(h)
		if !ok || hl != l {
			t.Fatalf("each gave handle %x that at does not name (%q %v)", h, k, ok)
		}
		seen[strings.Clone(k)] = l
	})
	if !maps.Equal(seen, want) {
		t.Fatalf("each saw %d locks, want %d", len(seen), len(want))
	}
	keys := slices.Sorted(maps.Keys(want))
	if got := tb.sortedKeys(); !slices.Equal(got, keys) {
		t.Fatalf("sorted keys differ: %d against %d", len(got), len(keys))
	}
}

// checkShards asserts the shards' own invariants in t: the used and free
// slots are exactly the slots taken, each used slot is once in the chain
// of its tag's bucket, the buckets outnumber the used slots, the keys are
// sorted (unless a bulk load left them so), and no chunk t may write is
// shared with a frozen copy.
func checkShards(t *testing.T, tb *table, frozen []table) {
	t.Helper()
	n := 0
	for si, s := range tb.shards {
		if s == nil {
			continue
		}
		if len(s.owned) != len(s.chunks) || int(s.nslots) > len(s.chunks)*slotChunkLen {
			t.Fatalf("shard %d: %d owned flags, %d chunks, %d slots", si, len(s.owned), len(s.chunks), s.nslots)
		}
		if l := len(s.heads); l&(l-1) != 0 || l < len(s.keys) {
			t.Fatalf("shard %d: %d buckets for %d keys", si, l, len(s.keys))
		}
		used := map[int32]bool{}
		for _, i := range s.keys {
			if used[i] || !s.slot(i).used {
				t.Fatalf("shard %d: slot %d listed twice or unused", si, i)
			}
			used[i] = true
		}
		for _, i := range s.free {
			if used[i] || s.slot(i).used {
				t.Fatalf("shard %d: free slot %d is used", si, i)
			}
		}
		if len(s.free)+len(s.keys) != int(s.nslots) {
			t.Fatalf("shard %d: %d free + %d used slots, %d taken", si, len(s.free), len(s.keys), s.nslots)
		}
		chained := map[int32]bool{}
		for b, first := range s.heads {
			for i := first; i >= 0; i = s.slot(i).next {
				if chained[i] || !used[i] || s.bucket(s.slot(i).tag) != b {
					t.Fatalf("shard %d: slot %d in bucket %d's chain twice, unused or of another bucket", si, i, b)
				}
				chained[i] = true
			}
		}
		if len(chained) != len(used) {
			t.Fatalf("shard %d: %d slots chained, %d used", si, len(chained), len(used))
		}
		if !s.unsorted && !slices.IsSortedFunc(s.keys, func(a, b int32) int { return strings.Compare(s.key(a), s.key(b)) }) {
			t.Fatalf("shard %d: keys out of order", si)
		}
		for c, chunk := range s.chunks {
			for _, f := range frozen {
				if fs := f.shards[si]; s.owned[c] && fs != nil && fs != s && slices.Contains(fs.chunks, chunk) {
					t.Fatalf("shard %d: chunk %d is written here and read by a frozen copy", si, c)
				}
			}
		}
		n += len(s.keys)
	}
	if n != tb.n {
		t.Fatalf("table counts %d locks, its shards hold %d", tb.n, n)
	}
}

// The table agrees with a plain map through random grants, replacements
// with and without a new owner, and removals, with the arena compacted on
// the way and frozen copies keeping what they saw; also when every key has
// the same hash, so that every lookup walks a chain.
func TestTableAgreesWithAMap(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprintf("collide=%v", collide), func(t *testing.T) {
			tb := newTable()
			if collide {
				tb.hashOf = func(string) uint64 { return 7 }
			}
			want := map[string]Lock{}
			rng := rand.New(rand.NewPCG(1, 2))
			var frozen []table
			var frozenWant []map[string]Lock
			compacted := false
			for step := range 20000 {
				k := fmt.Sprintf("k%03d-%s", rng.IntN(600), strings.Repeat("x", rng.IntN(40)))
				switch r := rng.IntN(10); {
				case r < 5:
					l := Lock{Token: uint64(step + 1), LeaseMS: uint64(rng.IntN(1000))}
					if rng.IntN(2) == 0 {
						l.Owner = fmt.Sprintf("owner-%d", rng.IntN(3))
					}
					tb.set(k, l)
					want[k] = l
				case r < 9:
					_, had := want[k]
					if _, ok := tb.remove(k); ok != had {
						t.Fatalf("remove(%q) = %v, held %v", k, ok, had)
					}
					delete(want, k)
				default:
					for _, s := range tb.shards {
						if s != nil && s.dead == 0 && len(s.arena) > 0 && step > 0 {
							compacted = true
						}
					}
					if len(frozen) < 5 {
						frozen = append(frozen, tb.freeze())
						frozenWant = append(frozenWant, maps.Clone(want))
					}
				}
				if step%2500 == 0 {
					checkTable(t, &tb, want)
					checkShards(t, &tb, frozen)
				}
			}
			checkTable(t, &tb, want)
			checkShards(t, &tb, frozen)
			for i := range frozen {
				checkTable(t, &frozen[i], frozenWant[i])
			}
			if !compacted {
				t.Fatal("no arena was compacted: the test did not exercise compaction")
			}
		})
	}
}

// A held lock's handle stays its own while it is held: across writes to
// other locks of its shard, compactions and freezes.
func TestHandleStaysWithItsLock(t *testing.T) {
	m := New()
	m.locks.hashOf = func(k string) uint64 { return 3 } // one shard, one chain
	_, h := m.ApplyAt(Command{Op: OpGrant, Key: "kept", LeaseMS: 5, Owner: "me"})
	for i := range 5000 {
		k := fmt.Sprintf("churn-%d-%s", i, strings.Repeat("y", 100))
		m.Apply(Command{Op: OpGrant, Key: k, LeaseMS: 1})
		if i%7 == 0 {
			m.Freeze()
		}
		m.Apply(Command{Op: OpRelease, Key: k})
	}
	if s := m.locks.shards[3]; len(s.arena) > 20000 {
		t.Fatalf("shard arena is %d bytes after 5,000 grants and releases: never compacted", len(s.arena))
	}
	if k, l, ok := m.At(h); !ok || k != "kept" || l.Owner != "me" || l.Token != 1 {
		t.Fatalf("At(kept's handle) = %q %+v %v", k, l, ok)
	}
	if got, ok := m.Handle("kept"); !ok || got != h {
		t.Fatalf("Handle(kept) = %x %v, want %x", got, ok, h)
	}
	res, rh := m.ApplyAt(Command{Op: OpRelease, Key: "kept"})
	if res.Status != Released || rh != h {
		t.Fatalf("release: %v handle %x, want Released %x", res.Status, rh, h)
	}
	if _, _, ok := m.At(h); ok {
		t.Fatal("At names a released lock")
	}
}

// BenchmarkCollectWithMillionLocks measures a full garbage collection with
// a million held locks of 250-byte keys in the heap: the cost every
// collection cycle of a member adds for its table. Every key is still a
// change since the last snapshot (none was taken), as after a fill.
//
//	go test ./fsm -run XXX -bench CollectWithMillionLocks -benchtime 10x
func BenchmarkCollectWithMillionLocks(b *testing.B) {
	m := New()
	pad := strings.Repeat("p", 250-20)
	for i := range 1_000_000 {
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("held/%012d/%s", i, pad), LeaseMS: 3600_000, Owner: "host:1234"})
	}
	gccost.Report(b, m)
}

// Handle 0 is ApplyAt's "no lock changed", so no held lock has it, not
// even the first slot of the first shard.
func TestNoLockHasHandleZero(t *testing.T) {
	m := New()
	m.locks.hashOf = func(string) uint64 { return 0 } // shard 0
	_, h := m.ApplyAt(Command{Op: OpGrant, Key: "first", LeaseMS: 5})
	if h == 0 {
		t.Fatal("the lock in shard 0's slot 0 has handle 0")
	}
	if got, ok := m.Handle("first"); !ok || got != h {
		t.Fatalf("Handle(first) = %x %v, want %x", got, ok, h)
	}
	if _, _, ok := m.At(0); ok {
		t.Fatal("At(0) names a lock")
	}
	if res, h0 := m.ApplyAt(Command{Op: OpExpire, Key: "first", Token: 9}); res.Existed || h0 != 0 {
		t.Fatalf("an Expire that removed nothing gave handle %x", h0)
	}
}

// BenchmarkSnapshotMillionLocks encodes a frozen table of a million locks
// with 250-byte keys that share a long prefix (as the bench's do): the
// work a member's snapshot does beside its loop, once per table's worth
// of log.
//
//	go test ./fsm -run XXX -bench SnapshotMillionLocks -benchtime 3x
func BenchmarkSnapshotMillionLocks(b *testing.B) {
	m := New()
	pad := strings.Repeat("p", 250-20)
	for i := range 1_000_000 {
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("held/%s/%012d", pad, i), LeaseMS: 3600_000, Owner: "host:1234"})
	}
	f := m.Freeze()
	b.ResetTimer()
	for range b.N {
		if err := f.WriteSnapshot(io.Discard, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(m.EncodedSize()))
}

// The shards' keys merge into one sorted order from any starting key,
// whatever number of shards hold keys (the tournament tree's shape
// changes with it: 1, 2, 3 and 5 runs, then most of the 1,024).
func TestKeysMergeInOrderFromAnyStart(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 2, 3, 5, 17, 3000} {
		m := New()
		var want []string
		for len(want) < n {
			k := fmt.Sprintf("k/%0*d", 1+rng.IntN(6), rng.IntN(1_000_000))
			if _, held := m.Get(k); !held {
				m.Apply(Command{Op: OpGrant, Key: k, LeaseMS: 5})
				want = append(want, k)
			}
		}
		slices.Sort(want)
		if got := m.Keys(); !slices.Equal(got, want) {
			t.Fatalf("%d keys: Keys() = %v..., want %v...", n, got[:min(len(got), 5)], want[:min(n, 5)])
		}
		for _, from := range []int{0, n / 3, n - 1} {
			if from < 0 || from >= n {
				continue
			}
			var got []string
			m.locks.eachSorted(nil, want[from], false, func(k string, _ Lock) bool { got = append(got, k); return true })
			if !slices.Equal(got, want[from+1:]) {
				t.Fatalf("%d keys, after %q: got %d keys, want %d", n, want[from], len(got), n-from-1)
			}
		}
	}
}

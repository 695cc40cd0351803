package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// deltaOf freezes m's changes and returns the delta's bytes.
func deltaOf(t testing.TB, m *Machine) []byte {
	t.Helper()
	f, ch := m.FreezeChanges()
	var b bytes.Buffer
	if err := f.WriteDelta(&b, ch, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// restoreChain restores base and applies deltas to it in order.
func restoreChain(t testing.TB, base []byte, deltas ...[]byte) *Machine {
	t.Helper()
	r, err := Restore(base)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range deltas {
		if err := r.ApplyDelta(d); err != nil {
			t.Fatalf("delta %d: %v", i, err)
		}
	}
	return r
}

// A table restored from a snapshot and the deltas taken after it, in
// order, is the table that took them: same snapshot bytes, same digest,
// same last token. Random commands make every kind of change: grants of
// new keys, releases and expiries of keys the base held and of keys
// granted since, renewals, keys granted and released between two deltas.
func TestSnapshotAndDeltasRestoreTheTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	m := New()
	apply := func(n int) {
		for range n {
			key := fmt.Sprintf("k/%03d", rng.IntN(300))
			l, held := m.Get(key)
			switch op := Op(1 + rng.IntN(4)); {
			case op == OpGrant:
				m.Apply(Command{Op: op, Key: key, LeaseMS: 1 + rng.Uint64N(9), Owner: fmt.Sprint("o", rng.IntN(3))})
			case held && rng.IntN(4) > 0: // mostly the holder's own token
				m.Apply(Command{Op: op, Key: key, Token: l.Token, LeaseMS: 1 + rng.Uint64N(9)})
			default:
				m.Apply(Command{Op: op, Key: key, Token: rng.Uint64N(50), LeaseMS: 5})
			}
		}
	}
	apply(3000)
	base := m.Snapshot()
	m.FreezeChanges() // the point the first delta starts at
	var deltas [][]byte
	for range 20 {
		apply(rng.IntN(400))
		deltas = append(deltas, deltaOf(t, m))
	}
	r := restoreChain(t, base, deltas...)
	if !bytes.Equal(r.Snapshot(), m.Snapshot()) || r.Digest() != m.Digest() || r.LastToken() != m.LastToken() {
		t.Fatalf("restored table differs: %d locks digest %s last %d, want %d %s %d", r.Len(), r.Digest(), r.LastToken(), m.Len(), m.Digest(), m.LastToken())
	}
}

// A delta costs what changed, not the table: keys granted and released
// between two deltas leave nothing in it, and a table of 100,000 locks
// with two changes writes a delta of two keys.
func TestDeltaHoldsOnlyWhatChanged(t *testing.T) {
	m := New()
	for i := range 100_000 {
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("held/%06d", i), LeaseMS: 1000})
	}
	m.FreezeChanges()
	for i := range 1000 { // churn that nets out
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("churn/%d", i), LeaseMS: 5})
		m.Apply(Command{Op: OpRelease, Key: fmt.Sprintf("churn/%d", i)})
	}
	m.Apply(Command{Op: OpRelease, Key: "held/000007"})
	m.Apply(Command{Op: OpGrant, Key: "new", LeaseMS: 5, Owner: "me"})
	f, ch := m.FreezeChanges()
	if ch.Len() != 1002 {
		t.Fatalf("changes record %d keys, want 1002", ch.Len())
	}
	var b bytes.Buffer
	if err := f.WriteDelta(&b, ch, nil); err != nil {
		t.Fatal(err)
	}
	if b.Len() > 128 { // two keys, and the states it starts and ends at
		t.Fatalf("delta of two changes is %d bytes", b.Len())
	}
	r := New()
	for i := range 100_000 {
		r.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("held/%06d", i), LeaseMS: 1000})
	}
	if err := r.ApplyDelta(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	if r.Digest() != m.Digest() {
		t.Fatal("delta did not carry the two changes")
	}
}

// Changes absorbed into later ones give the delta from the earlier point:
// a driver that drops a waiting snapshot for a later one keeps its
// changes.
func TestAbsorbedChangesSpanBothIntervals(t *testing.T) {
	m := New()
	m.Apply(Command{Op: OpGrant, Key: "a", LeaseMS: 1})
	m.Apply(Command{Op: OpGrant, Key: "b", LeaseMS: 1})
	base := m.Snapshot()
	m.FreezeChanges()
	m.Apply(Command{Op: OpRelease, Key: "a"})
	m.Apply(Command{Op: OpGrant, Key: "c", LeaseMS: 1})
	_, first := m.FreezeChanges()
	m.Apply(Command{Op: OpGrant, Key: "a", LeaseMS: 2})
	m.Apply(Command{Op: OpRelease, Key: "c"})
	m.Apply(Command{Op: OpRelease, Key: "b"})
	f, second := m.FreezeChanges()
	second.Absorb(first)
	var b bytes.Buffer
	if err := f.WriteDelta(&b, second, nil); err != nil {
		t.Fatal(err)
	}
	r := restoreChain(t, base, b.Bytes())
	if r.Digest() != m.Digest() {
		t.Fatalf("absorbed delta restores %d locks, want %d", r.Len(), m.Len())
	}
}

// Random runs of absorbed changes restore the table too: a key's state at
// the start of the earliest interval and at the end of the latest is what
// the delta says, whatever the intervals between did to it (granted and
// released in one, granted again in the next, and so on).
func TestRandomAbsorbedDeltasRestoreTheTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	m := New()
	step := func() {
		key := fmt.Sprintf("k/%02d", rng.IntN(40))
		if l, held := m.Get(key); held {
			m.Apply(Command{Op: OpRelease, Key: key, Token: l.Token})
		} else {
			m.Apply(Command{Op: OpGrant, Key: key, LeaseMS: 1 + rng.Uint64N(9)})
		}
	}
	for range 200 {
		step()
	}
	base := m.Snapshot()
	m.FreezeChanges()
	var deltas [][]byte
	for range 50 {
		var pending *Changes
		for range rng.IntN(4) { // intervals whose snapshots were dropped
			for range rng.IntN(30) {
				step()
			}
			_, ch := m.FreezeChanges()
			ch.Absorb(pending)
			pending = ch
		}
		for range rng.IntN(30) {
			step()
		}
		f, ch := m.FreezeChanges()
		ch.Absorb(pending)
		var b bytes.Buffer
		if err := f.WriteDelta(&b, ch, nil); err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, b.Bytes())
	}
	r := restoreChain(t, base, deltas...)
	if !bytes.Equal(r.Snapshot(), m.Snapshot()) {
		t.Fatalf("restored table differs: %d locks, want %d", r.Len(), m.Len())
	}
}

// A delta applied to a table it was not taken from is refused where it
// cannot fit: removing a key the table lacks, or going back in tokens.
func TestApplyDeltaRejectsADeltaThatDoesNotFit(t *testing.T) {
	m := New()
	m.Apply(Command{Op: OpGrant, Key: "a", LeaseMS: 1})
	m.FreezeChanges()
	m.Apply(Command{Op: OpRelease, Key: "a"})
	d := deltaOf(t, m)
	if err := New().ApplyDelta(d); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("removal of a missing key: %v, want ErrCorrupt", err)
	}
	ahead := New()
	for range 3 {
		ahead.Apply(Command{Op: OpGrant, Key: "x", LeaseMS: 1})
		ahead.Apply(Command{Op: OpRelease, Key: "x"})
	}
	ahead.Apply(Command{Op: OpGrant, Key: "a", LeaseMS: 1})
	if err := ahead.ApplyDelta(d); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("delta behind the table's last token: %v, want ErrCorrupt", err)
	}
	bad := bytes.Clone(d)
	bad[len(bad)-1] ^= 1
	if err := New().ApplyDelta(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("checksum mismatch: %v, want ErrCorrupt", err)
	}
}

func FuzzApplyDelta(f *testing.F) {
	m := New()
	m.Apply(Command{Op: OpGrant, Key: "locks/a", LeaseMS: 10, Owner: "w"})
	m.FreezeChanges()
	m.Apply(Command{Op: OpRelease, Key: "locks/a"})
	m.Apply(Command{Op: OpGrant, Key: "locks/ab", LeaseMS: 30})
	f.Add(deltaOf(f, m))
	f.Add(deltaOf(f, New()))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := New()
		r.Apply(Command{Op: OpGrant, Key: "locks/a", LeaseMS: 10, Owner: "w"})
		if err := r.ApplyDelta(data); err != nil {
			return
		}
		again, err := Restore(r.Snapshot())
		if err != nil || again.Digest() != r.Digest() {
			t.Fatalf("table after a delta does not survive a snapshot: %v", err)
		}
	})
}

// A delta's new keys go to their shards unsorted and are sorted once at
// its end; a removal in between finds its key in the unsorted shard. With
// every key in one shard, the table after the delta lists and encodes in
// key order, as the table it was written from does.
func TestDeltaInOneShardKeepsKeyOrder(t *testing.T) {
	oneShard := func(m *Machine) *Machine {
		m.locks.hashOf = func(k string) uint64 { return uint64(len(k)) * tableShards }
		return m
	}
	grantBase := func(m *Machine) *Machine {
		for _, k := range []string{"x", "y"} {
			m.Apply(Command{Op: OpGrant, Key: k, LeaseMS: 1})
		}
		return m
	}
	m := grantBase(oneShard(New()))
	m.FreezeChanges()
	for _, k := range []string{"e", "b", "z", "d", "a", "c"} {
		m.Apply(Command{Op: OpGrant, Key: k, LeaseMS: 2})
	}
	// Applied after the new keys a to e, which sort before it: a binary
	// search of the shard's keys would not find it.
	m.Apply(Command{Op: OpRelease, Key: "x"})
	m.Apply(Command{Op: OpRelease, Key: "z"})
	d := deltaOf(t, m)
	r := grantBase(oneShard(New()))
	if err := r.ApplyDelta(d); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Keys(), m.Keys(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("keys after the delta %v, want %v", got, want)
	}
	if !bytes.Equal(r.Snapshot(), m.Snapshot()) {
		t.Fatal("the table after the delta encodes otherwise than the one it was written from")
	}
}

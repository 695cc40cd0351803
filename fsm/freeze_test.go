package fsm

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
)

// A frozen copy is the table as it was: no later Grant, Release, Expire or
// Renew shows in it, whichever shard they touch, and encoding it equals
// encoding the table at the moment it was frozen.
func TestFrozenTableIgnoresLaterWrites(t *testing.T) {
	m := New()
	for i := range 5000 {
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("k%05d", i), LeaseMS: 1000})
	}
	want, wantDigest := m.Snapshot(), m.Digest()
	f := m.Freeze()
	for i := range 5000 {
		k := fmt.Sprintf("k%05d", i)
		switch i % 4 {
		case 0:
			m.Apply(Command{Op: OpRelease, Key: k})
		case 1:
			l, _ := m.Get(k)
			m.Apply(Command{Op: OpExpire, Key: k, Token: l.Token})
		case 2:
			l, _ := m.Get(k)
			m.Apply(Command{Op: OpRenew, Key: k, Token: l.Token, LeaseMS: 9})
		case 3:
			m.Apply(Command{Op: OpGrant, Key: "new" + k, LeaseMS: 5})
		}
	}
	if got := f.Snapshot(); !bytes.Equal(got, want) {
		t.Fatalf("frozen snapshot changed after later writes (%d bytes, want %d)", len(got), len(want))
	}
	if f.Digest() != wantDigest || f.Len() != 5000 || f.LastToken() != 5000 {
		t.Fatalf("frozen copy: digest %s len %d last %d, want %s 5000 5000", f.Digest(), f.Len(), f.LastToken(), wantDigest)
	}
	// The live table went on: its own snapshot restores to what it holds.
	r, err := Restore(m.Snapshot())
	if err != nil || r.Digest() != m.Digest() || r.Len() != m.Len() {
		t.Fatalf("live table after freeze: restore err %v, digest %s want %s", err, r.Digest(), m.Digest())
	}
	// A second freeze sees the writes the first did not.
	if f2 := m.Freeze(); f2.Digest() != m.Digest() {
		t.Fatalf("second freeze digest %s, want %s", f2.Digest(), m.Digest())
	}
}

// Encoding a frozen copy on another goroutine while the machine applies is
// race-free (run with -race) and gives the frozen table.
func TestFrozenSnapshotConcurrentWithApply(t *testing.T) {
	m := New()
	for i := range 3000 {
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("k%d", i), LeaseMS: 1000})
	}
	want := m.Snapshot()
	f := m.Freeze()
	var wg sync.WaitGroup
	var got []byte
	wg.Add(1)
	go func() { defer wg.Done(); got = f.Snapshot() }()
	for i := range 3000 {
		m.Apply(Command{Op: OpRelease, Key: fmt.Sprintf("k%d", i)})
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("n%d", i), LeaseMS: 7})
	}
	wg.Wait()
	if !bytes.Equal(got, want) {
		t.Fatal("snapshot encoded beside applies differs from the table frozen")
	}
}

// The first write to a shard after a freeze copies the chunk of slots it
// writes, not the shard's every slot: what a snapshot costs the member in
// copies (and so in collections) must not grow with the table. The frozen
// copy still reads every lock it had.
func TestWriteAfterFreezeCopiesOneChunk(t *testing.T) {
	m := New()
	// Every key in shard 3, spread over its buckets by the hash's high half.
	m.locks.hashOf = func(k string) uint64 { return maphash.String(m.locks.seed, k)<<32 | 3 }
	const n = 20 * slotChunkLen
	for i := range n {
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("k%05d", i), LeaseMS: 1000})
	}
	want := m.Snapshot()
	f := m.Freeze()
	l, _ := m.Get("k00007")
	m.Apply(Command{Op: OpRenew, Key: "k00007", Token: l.Token, LeaseMS: 9})
	live, frozen := m.locks.shards[3], f.m.locks.shards[3]
	if live == frozen {
		t.Fatal("the write went to the shard the frozen copy shares")
	}
	copied := 0
	for c := range live.chunks {
		if live.chunks[c] != frozen.chunks[c] {
			copied++
		}
	}
	if copied != 1 {
		t.Fatalf("a renew after a freeze copied %d chunks of %d, want 1", copied, len(live.chunks))
	}
	if got := f.Snapshot(); !bytes.Equal(got, want) {
		t.Fatal("the frozen copy changed")
	}
	if got, _ := m.Get("k00007"); got.LeaseMS != 9 {
		t.Fatalf("renewed lease %d, want 9", got.LeaseMS)
	}
}

// millionHeld is a table holding a million locks of 1000ms leases, whose
// keys are prefix and a seven-digit number.
func millionHeld(prefix string) *Machine {
	m := New()
	for i := range 1_000_000 {
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("%s-%07d", prefix, i), LeaseMS: 1000})
	}
	return m
}

func BenchmarkApplyAfterFreeze(b *testing.B) {
	m := millionHeld("key")
	b.ResetTimer()
	for i := range b.N {
		if i%100_000 == 0 {
			m.Freeze()
		}
		k := fmt.Sprintf("key-%07d", i%1_000_000)
		l, _ := m.Get(k)
		m.Apply(Command{Op: OpRenew, Key: k, Token: l.Token, LeaseMS: 2000})
	}
}

// WriteSnapshot streams exactly the bytes Snapshot returns (keys merged
// from shards sorted one by one), calling yield as it goes.
func TestWriteSnapshotStreamsSnapshotBytes(t *testing.T) {
	for _, n := range []int{0, 1, 7, 3000} {
		m := New()
		for i := range n {
			m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("%x-key", (i*7919)%100003), LeaseMS: uint64(i)})
		}
		var b bytes.Buffer
		yields := 0
		if err := m.Freeze().WriteSnapshot(&b, func() { yields++ }); err != nil {
			t.Fatal(err)
		}
		want := m.Snapshot()
		if !bytes.Equal(b.Bytes(), want) {
			t.Fatalf("%d locks: streamed %d bytes that differ from Snapshot's %d", n, b.Len(), len(want))
		}
		if r, err := Restore(b.Bytes()); err != nil || r.Digest() != m.Digest() {
			t.Fatalf("%d locks: the streamed snapshot does not restore the table: %v", n, err)
		}
		if n >= 3000 && yields < 3000/512 {
			t.Fatalf("%d locks: yield called %d times, want at least one per 512 locks", n, yields)
		}
	}
}

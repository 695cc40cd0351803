package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestGrantKeepsItsOwnerThroughRenewAndSnapshot(t *testing.T) {
	m := New()
	m.Apply(Command{Op: OpGrant, Key: "job", LeaseMS: 1000, Owner: "web-1:4242"})
	m.Apply(Command{Op: OpRenew, Key: "job", Token: 1, LeaseMS: 2000})
	if l, _ := m.Get("job"); l.Owner != "web-1:4242" || l.LeaseMS != 2000 {
		t.Fatalf("after renew: %+v, want owner web-1:4242 and lease 2000", l)
	}
	r, err := Restore(m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := r.Get("job"); l.Owner != "web-1:4242" {
		t.Fatalf("restored lock %+v lost its owner", l)
	}
	other := New()
	other.Apply(Command{Op: OpGrant, Key: "job", LeaseMS: 1000, Owner: "web-2:1"})
	other.Apply(Command{Op: OpRenew, Key: "job", Token: 1, LeaseMS: 2000})
	if other.Digest() == m.Digest() {
		t.Fatal("tables that differ only in an owner share a digest")
	}
}

// Data written before locks had owners (entry and snapshot version 1)
// still decodes, and a table without owners keeps the digest it had.
func TestVersionOneEntriesAndSnapshotsStillDecode(t *testing.T) {
	v1 := []byte{entryVersionV1, 1, 1, 2, 3, byte(OpGrant), 1, 'k', 0xe8, 0x07} // Grant{"k", 1000ms}
	envs, err := DecodeBatch(v1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Envelope{{ID: RequestID{1, 2}, Tag: 3, Cmd: Command{Op: OpGrant, Key: "k", LeaseMS: 1000}}}
	if !reflect.DeepEqual(envs, want) {
		t.Fatalf("decoded %+v, want %+v", envs, want)
	}
	body := []byte(snapshotMagic)
	body = append(body, snapshotFormatV1)
	body = binary.AppendUvarint(body, 5) // last token
	body = binary.AppendUvarint(body, 1) // one lock
	body = append(body, 1, 'k', 5, 0xe8, 0x07)
	snap := binary.BigEndian.AppendUint32(body, crc32.ChecksumIEEE(body))
	m, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	fresh := New()
	fresh.lastToken = 4
	fresh.Apply(Command{Op: OpGrant, Key: "k", LeaseMS: 1000})
	if m.Digest() != fresh.Digest() {
		t.Fatalf("a version 1 snapshot restores to digest %s, want %s", m.Digest(), fresh.Digest())
	}
}

// List pages through the table in key order from any key, under a prefix,
// and agrees with a sort of the whole table, also after a freeze made the
// shards copy on write.
func TestListAgreesWithASortedScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	m := New()
	var frozen []*Frozen
	prefixes := []string{"a/", "a/b/", "b/", "c"}
	for i := range 20000 {
		key := fmt.Sprintf("%s%d", prefixes[rng.IntN(len(prefixes))], rng.IntN(5000))
		if rng.IntN(3) == 0 {
			m.Apply(Command{Op: OpRelease, Key: key})
		} else {
			m.Apply(Command{Op: OpGrant, Key: key, LeaseMS: 10})
		}
		if i%5000 == 0 {
			frozen = append(frozen, m.Freeze())
		}
	}
	all := m.Keys()
	if !slices.IsSorted(all) || len(all) != m.Len() {
		t.Fatalf("Keys: %d keys, sorted %v; table has %d", len(all), slices.IsSorted(all), m.Len())
	}
	for _, prefix := range []string{"", "a/", "a/b/", "b/", "c", "d", "a/b/1"} {
		var want []string
		for _, k := range all {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		for _, limit := range []int{1, 7, 1000, 100000} {
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				page, more := m.List(prefix, after, limit)
				if len(page) > limit || (more && len(page) != limit) {
					t.Fatalf("prefix %q limit %d: page of %d, more %v", prefix, limit, len(page), more)
				}
				for _, e := range page {
					if l, ok := m.Get(e.Key); !ok || l != e.Lock {
						t.Fatalf("listed %q %+v, table has %+v", e.Key, e.Lock, l)
					}
					got = append(got, e.Key)
				}
				if !more {
					break
				}
				after = page[len(page)-1].Key
				if pages > len(all) {
					t.Fatal("paging does not end")
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("prefix %q limit %d: listed %d keys, want %d", prefix, limit, len(got), len(want))
			}
		}
	}
	// An after outside the prefix's range lists nothing, or from the prefix on.
	if page, more := m.List("a/", "z", 10); len(page) != 0 || more {
		t.Fatalf("after past the prefix: %d locks, more %v", len(page), more)
	}
	for _, f := range frozen {
		if !slices.IsSorted(f.m.Keys()) || len(f.m.Keys()) != f.Len() {
			t.Fatal("a frozen copy's keys changed under later writes")
		}
	}
}

// BenchmarkGrantReleaseWithMillionHeld is the uncontended workload's cost
// in the table beside a million held locks: a new key granted and
// released, which inserts into and deletes from its shard's sorted keys.
func BenchmarkGrantReleaseWithMillionHeld(b *testing.B) {
	m := millionHeld("held")
	b.ResetTimer()
	for i := range b.N {
		k := fmt.Sprintf("work-%d", i)
		m.Apply(Command{Op: OpGrant, Key: k, LeaseMS: 1000, Owner: "bench"})
		m.Apply(Command{Op: OpRelease, Key: k})
	}
}

// BenchmarkListPageWithMillionHeld is one page of 100 from the middle of a
// million held locks.
func BenchmarkListPageWithMillionHeld(b *testing.B) {
	m := millionHeld("held")
	b.ResetTimer()
	for i := range b.N {
		if page, _ := m.List("held-", fmt.Sprintf("held-%07d", i*7919%1_000_000), 100); len(page) == 0 {
			b.Fatal("empty page")
		}
	}
}

// Snapshot format 3 writes each key as the prefix it shares with the key
// before it and the rest: keys under one prefix take little more than
// their tails, the table restores whole, a format 2 snapshot (keys whole)
// still restores to the same table, and a key claiming more shared bytes
// than the key before it had is refused.
func TestSnapshotKeysSharePrefixes(t *testing.T) {
	m := New()
	prefix := strings.Repeat("locks/orders/", 15) // 195 bytes
	for i := range 1000 {
		m.Apply(Command{Op: OpGrant, Key: fmt.Sprintf("%s%06d", prefix, i), LeaseMS: 1000, Owner: "w1"})
	}
	snap := m.Snapshot()
	if whole := m.Len() * (len(prefix) + 6); len(snap) > whole/10 {
		t.Errorf("snapshot of %d keys of %d bytes takes %d bytes, want under a tenth of %d", m.Len(), len(prefix)+6, len(snap), whole)
	}
	back, err := Restore(snap)
	if err != nil || back.Digest() != m.Digest() || !slices.Equal(back.Keys(), m.Keys()) {
		t.Fatalf("format 3 restore: %v, digest %s want %s", err, back.Digest(), m.Digest())
	}

	// The same table in format 2.
	body := []byte(snapshotMagic)
	body = append(body, snapshotFormatV2)
	body = binary.AppendUvarint(body, m.LastToken())
	body = binary.AppendUvarint(body, uint64(m.Len()))
	for _, k := range m.Keys() {
		l, _ := m.Get(k)
		body = binary.AppendUvarint(body, uint64(len(k)))
		body = append(body, k...)
		body = binary.AppendUvarint(body, l.Token)
		body = binary.AppendUvarint(body, l.LeaseMS)
		body = binary.AppendUvarint(body, uint64(len(l.Owner)))
		body = append(body, l.Owner...)
	}
	v2, err := Restore(binary.BigEndian.AppendUint32(body, crc32.ChecksumIEEE(body)))
	if err != nil || v2.Digest() != m.Digest() {
		t.Fatalf("format 2 restore: %v, digest %s want %s", err, v2.Digest(), m.Digest())
	}

	// One lock whose key claims to share 3 bytes with no key before it.
	body = append([]byte(snapshotMagic), snapshotFormat)
	body = binary.AppendUvarint(body, 1)
	body = binary.AppendUvarint(body, 1)
	body = append(body, 3, 1, 'k', 1, 5, 0)
	if _, err := Restore(binary.BigEndian.AppendUint32(body, crc32.ChecksumIEEE(body))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a key sharing more than the key before it: %v, want ErrCorrupt", err)
	}
}

package fsm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestApplyEveryCommandInEveryState(t *testing.T) {
	// States: key free; key held by token 1 (granted first).
	tests := []struct {
		name string
		held bool
		cmd  Command
		want Result
		// after: whether the key is held afterwards and by which token
		afterHeld  bool
		afterToken uint64
	}{
		{"grant free", false, Command{Op: OpGrant, Key: "k", LeaseMS: 100}, Result{Status: Granted, Token: 1}, true, 1},
		{"grant held", true, Command{Op: OpGrant, Key: "k", LeaseMS: 100}, Result{Status: GrantRejected}, true, 1},
		{"release free", false, Command{Op: OpRelease, Key: "k"}, Result{Status: NotFound}, false, 0},
		{"release held", true, Command{Op: OpRelease, Key: "k"}, Result{Status: Released}, false, 0},
		{"expire free", false, Command{Op: OpExpire, Key: "k", Token: 1}, Result{Status: Expired}, false, 0},
		{"expire held match", true, Command{Op: OpExpire, Key: "k", Token: 1}, Result{Status: Expired, Existed: true}, false, 0},
		{"expire held other token", true, Command{Op: OpExpire, Key: "k", Token: 7}, Result{Status: Expired}, true, 1},
		{"renew free", false, Command{Op: OpRenew, Key: "k", Token: 1, LeaseMS: 50}, Result{Status: NotFound}, false, 0},
		{"renew held match", true, Command{Op: OpRenew, Key: "k", Token: 1, LeaseMS: 50}, Result{Status: Renewed, Token: 1}, true, 1},
		{"renew held other token", true, Command{Op: OpRenew, Key: "k", Token: 2, LeaseMS: 50}, Result{Status: NotFound}, true, 1},
		{"unknown op", true, Command{Op: 99, Key: "k"}, Result{Status: Noop}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New()
			if tt.held {
				if r := m.Apply(Command{Op: OpGrant, Key: "k", LeaseMS: 100}); r.Status != Granted || r.Token != 1 {
					t.Fatalf("setup grant = %+v", r)
				}
			}
			if got := m.Apply(tt.cmd); got != tt.want {
				t.Fatalf("Apply(%v) = %+v, want %+v", tt.cmd, got, tt.want)
			}
			l, held := m.Get("k")
			if held != tt.afterHeld || l.Token != tt.afterToken {
				t.Fatalf("after: held=%v token=%d, want held=%v token=%d", held, l.Token, tt.afterHeld, tt.afterToken)
			}
		})
	}
}

func TestRenewUpdatesLease(t *testing.T) {
	m := New()
	m.Apply(Command{Op: OpGrant, Key: "k", LeaseMS: 100})
	m.Apply(Command{Op: OpRenew, Key: "k", Token: 1, LeaseMS: 900})
	if l, _ := m.Get("k"); l.LeaseMS != 900 {
		t.Fatalf("lease after renew = %d, want 900", l.LeaseMS)
	}
}

func TestTokensStrictlyIncreaseAcrossKeys(t *testing.T) {
	m := New()
	var last uint64
	for i := 0; i < 50; i++ {
		key := []string{"a", "b", "c"}[i%3]
		m.Apply(Command{Op: OpRelease, Key: key})
		r := m.Apply(Command{Op: OpGrant, Key: key, LeaseMS: 10})
		if r.Status != Granted || r.Token <= last {
			t.Fatalf("grant %d: %+v after token %d", i, r, last)
		}
		last = r.Token
	}
}

// The seed's scenario: an Expire delayed past a re-grant of the same key must
// not remove the new lock.
func TestLateExpireCannotRemoveRegrantedLock(t *testing.T) {
	m := New()
	first := m.Apply(Command{Op: OpGrant, Key: "k", LeaseMS: 100})
	// The leader proposes Expire{k, first}; before it commits, the lock is
	// released and granted again.
	m.Apply(Command{Op: OpRelease, Key: "k"})
	second := m.Apply(Command{Op: OpGrant, Key: "k", LeaseMS: 100})
	if second.Token <= first.Token {
		t.Fatalf("second token %d not above first %d", second.Token, first.Token)
	}
	late := m.Apply(Command{Op: OpExpire, Key: "k", Token: first.Token})
	if late != (Result{Status: Expired, Existed: false}) {
		t.Fatalf("late expire = %+v", late)
	}
	if l, held := m.Get("k"); !held || l.Token != second.Token {
		t.Fatalf("lock after late expire: held=%v token=%d, want %d", held, l.Token, second.Token)
	}
	// A duplicate of a real expiry is just as harmless.
	m.Apply(Command{Op: OpExpire, Key: "k", Token: second.Token})
	if dup := m.Apply(Command{Op: OpExpire, Key: "k", Token: second.Token}); dup.Existed {
		t.Fatalf("duplicate expire removed something: %+v", dup)
	}
}

func randomCommands(rng *rand.Rand, n int) []Command {
	keys := []string{"a", "b", "c", "d"}
	cmds := make([]Command, n)
	for i := range cmds {
		c := Command{Op: Op(1 + rng.IntN(4)), Key: keys[rng.IntN(len(keys))]}
		switch c.Op {
		case OpGrant:
			c.LeaseMS = 10 + rng.Uint64N(1000)
			if rng.IntN(2) == 0 {
				c.Owner = fmt.Sprintf("host-%d:%d", rng.IntN(3), rng.IntN(100))
			}
		case OpExpire:
			c.Token = rng.Uint64N(uint64(i) + 2)
		case OpRenew:
			c.Token = rng.Uint64N(uint64(i) + 2)
			c.LeaseMS = 10 + rng.Uint64N(1000)
		}
		cmds[i] = c
	}
	return cmds
}

func TestDeterminismAndSnapshotRestore(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		cmds := randomCommands(rng, 2000)
		a, b := New(), New()
		var restored *Machine
		mid := 700 + int(seed)*31
		for i, c := range cmds {
			if i == mid {
				var err error
				if restored, err = Restore(a.Snapshot()); err != nil {
					t.Fatalf("seed %d: restore: %v", seed, err)
				}
				if restored.Digest() != a.Digest() {
					t.Fatalf("seed %d: restored digest differs", seed)
				}
			}
			ra, rb := a.Apply(c), b.Apply(c)
			if ra != rb {
				t.Fatalf("seed %d cmd %d %v: %+v != %+v", seed, i, c, ra, rb)
			}
			if restored != nil {
				if rr := restored.Apply(c); rr != ra {
					t.Fatalf("seed %d cmd %d: restored machine gave %+v, want %+v", seed, i, rr, ra)
				}
			}
		}
		if a.Digest() != b.Digest() || a.Digest() != restored.Digest() {
			t.Fatalf("seed %d: digests differ", seed)
		}
		if !reflect.DeepEqual(a.Snapshot(), restored.Snapshot()) {
			t.Fatalf("seed %d: snapshots differ", seed)
		}
	}
}

func TestDigestDiffersForDifferentState(t *testing.T) {
	a, b := New(), New()
	a.Apply(Command{Op: OpGrant, Key: "x", LeaseMS: 10})
	if a.Digest() == b.Digest() {
		t.Fatal("different tables share a digest")
	}
	b.Apply(Command{Op: OpGrant, Key: "x", LeaseMS: 10})
	if a.Digest() != b.Digest() {
		t.Fatal("equal tables have different digests")
	}
}

func TestBatchRoundTrip(t *testing.T) {
	envs := []Envelope{
		{ID: RequestID{Node: 1, Seq: 1 << 40}, Tag: 9, Cmd: Command{Op: OpGrant, Key: "k1", LeaseMS: 1000}},
		{ID: RequestID{Node: 1, Seq: 2}, Cmd: Command{Op: OpGrant, Key: "k0", LeaseMS: 10, Owner: "web-1:4242"}},
		{ID: RequestID{Node: 2, Seq: 3}, Cmd: Command{Op: OpRelease, Key: "k2"}},
		{ID: RequestID{Node: 3, Seq: 4}, Cmd: Command{Op: OpExpire, Key: "k3", Token: 77}},
		{ID: RequestID{Node: 3, Seq: 5}, Cmd: Command{Op: OpRenew, Key: "k4", Token: 78, LeaseMS: 20}},
	}
	got, err := DecodeBatch(EncodeBatch(envs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, envs) {
		t.Fatalf("round trip: got %+v want %+v", got, envs)
	}
}

func TestDecodeRejectsBadInput(t *testing.T) {
	good := EncodeBatch([]Envelope{{Cmd: Command{Op: OpGrant, Key: "k", LeaseMS: 10}}})
	long := make([]byte, MaxKeyLen+1)
	for i := range long {
		long[i] = 'x'
	}
	cases := map[string][]byte{
		"empty":      {},
		"version":    append([]byte{9}, good[1:]...),
		"truncated":  good[:len(good)-1],
		"trailing":   append(append([]byte{}, good...), 0),
		"unknown op": EncodeBatch([]Envelope{{Cmd: Command{Op: 42, Key: "k"}}}),
		"empty key":  EncodeBatch([]Envelope{{Cmd: Command{Op: OpRelease}}}),
		"long key":   EncodeBatch([]Envelope{{Cmd: Command{Op: OpRelease, Key: string(long)}}}),
		"long owner": EncodeBatch([]Envelope{{Cmd: Command{Op: OpGrant, Key: "k", LeaseMS: 10, Owner: string(long[:MaxOwnerLen+1])}}}),
		"huge count": {1, 0xff, 0xff, 0xff, 0x7f},
		"oversized":  make([]byte, MaxEntryBytes+1),
	}
	for name, data := range cases {
		if _, err := DecodeBatch(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestRestoreRejectsCorruption(t *testing.T) {
	m := New()
	m.Apply(Command{Op: OpGrant, Key: "k", LeaseMS: 10})
	snap := m.Snapshot()
	for i := range snap {
		bad := append([]byte{}, snap...)
		bad[i] ^= 0x40
		if _, err := Restore(bad); err == nil {
			t.Fatalf("flipped byte %d accepted", i)
		}
	}
	if _, err := Restore(snap[:len(snap)-2]); err == nil {
		t.Fatal("truncated snapshot accepted")
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(EncodeBatch([]Envelope{{ID: RequestID{1, 2}, Tag: 3, Cmd: Command{Op: OpRenew, Key: "k", Token: 4, LeaseMS: 5}}}))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		envs, err := DecodeBatch(data)
		if err != nil {
			return
		}
		// Whatever decodes must survive a re-encoding unchanged.
		again, err := DecodeBatch(EncodeBatch(envs))
		if err != nil || !reflect.DeepEqual(again, envs) {
			t.Fatalf("re-encoding changed %+v into %+v (%v)", envs, again, err)
		}
	})
}

func FuzzRestore(f *testing.F) {
	m := New()
	m.Apply(Command{Op: OpGrant, Key: "a", LeaseMS: 10})
	m.Apply(Command{Op: OpGrant, Key: "b", LeaseMS: 20})
	f.Add(m.Snapshot())
	m.Apply(Command{Op: OpGrant, Key: "locks/a", LeaseMS: 30, Owner: "w"})
	m.Apply(Command{Op: OpGrant, Key: "locks/ab", LeaseMS: 30})
	f.Add(m.Snapshot()) // keys sharing prefixes (format 3)
	f.Add(New().Snapshot())
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Restore(data)
		if err != nil {
			return
		}
		again, err := Restore(r.Snapshot())
		if err != nil || again.Digest() != r.Digest() {
			t.Fatalf("restored table does not survive a snapshot: %v", err)
		}
	})
}

// The digest is kept as the table changes: after any sequence of commands
// it equals the digest of the same table built from scratch (a snapshot
// restored), and it moves with every change.
func TestDigestKeptIncrementally(t *testing.T) {
	m := New()
	seen := map[string]bool{m.Digest(): true}
	cmds := []Command{
		{Op: OpGrant, Key: "a", LeaseMS: 1000},
		{Op: OpGrant, Key: "b", LeaseMS: 1000},
		{Op: OpRenew, Key: "a", Token: 1, LeaseMS: 2000},
		{Op: OpRelease, Key: "b"},
		{Op: OpGrant, Key: "b", LeaseMS: 1000},
		{Op: OpExpire, Key: "a", Token: 1},
	}
	for _, c := range cmds {
		m.Apply(c)
		restored, err := Restore(m.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		if m.Digest() != restored.Digest() {
			t.Fatalf("after %v: kept digest %s, from scratch %s", c, m.Digest(), restored.Digest())
		}
		if seen[m.Digest()] {
			t.Fatalf("after %v: digest %s seen before", c, m.Digest())
		}
		seen[m.Digest()] = true
	}
}

// SkipTokens moves the next grant's token past n tokens (those a restored
// table's old cluster may have issued) and never wraps the token space.
func TestSkipTokensRaisesTheNextGrant(t *testing.T) {
	m := New()
	m.Apply(Command{Op: OpGrant, Key: "a", LeaseMS: 1000})
	if err := m.SkipTokens(1000); err != nil {
		t.Fatal(err)
	}
	r, err := Restore(m.Snapshot())
	if err != nil {
		t.Fatalf("restore after skipping: %v", err)
	}
	if got := r.Apply(Command{Op: OpGrant, Key: "b", LeaseMS: 1000}); got.Token != 1002 {
		t.Fatalf("next grant after skipping 1000 past token 1: %d, want 1002", got.Token)
	}
	if err := r.SkipTokens(math.MaxUint64 - 1002); err == nil {
		t.Fatal("skipping to the end of the token space succeeded: the next grant would wrap to 0")
	}
	if r.LastToken() != 1002 {
		t.Fatalf("a refused skip changed the last token to %d", r.LastToken())
	}
}

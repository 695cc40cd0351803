package member

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/gccost"
)

// checkTimers asserts the timers' invariants (LockManager.invariantViolation):
// every lease of the table is in the lease queue exactly once, at the
// place it records, and every queued waiter is in the wait queue exactly
// once.
func checkTimers(t testing.TB, lm *LockManager) {
	t.Helper()
	if err := lm.invariantViolation(); err != nil {
		t.Fatal(err)
	}
}

// Leases run out in deadline order, ties in key order, whatever order
// they were granted in: the leader's Expires come out in that order, so a
// replay proposes the same entries.
func TestExpiresComeInDeadlineThenKeyOrder(t *testing.T) {
	h := newLM(t, "")
	h.follow(2, 3)
	for _, g := range []fsm.Command{
		{Op: fsm.OpGrant, Key: "c", LeaseMS: 3000},
		{Op: fsm.OpGrant, Key: "b", LeaseMS: 2000},
		{Op: fsm.OpGrant, Key: "a", LeaseMS: 2000},
		{Op: fsm.OpGrant, Key: "d", LeaseMS: 1000},
	} {
		h.foreign(2, g)
	}
	h.do(func() { h.lm.Become(true, 3, 1) })
	h.barrier(3)
	h.expect("before any deadline", h.tick(999*ms), "")
	h.expect("d's deadline", h.tick(1000*ms), `propose Expire{"d", 4}@3`)
	h.commit()
	h.expect("a and b together, in key order", h.tick(2500*ms), `propose Expire{"a", 3}@3; propose Expire{"b", 2}@3`)
	h.expect("c", h.tick(3000*ms), `propose Expire{"c", 1}@3`)
	h.commitAll()
	h.expect("all gone", h.tick(10*time.Second), "")
	checkTimers(t, h.lm)
}

// A mass expiry (a table whose leases all run out together) is proposed
// maxExpiresPerTick at a time, so no tick does work in the size of the
// table; the rest follow on the next ticks, and an Expire proposed is not
// proposed again within the second.
func TestMassExpirySpreadOverTicks(t *testing.T) {
	h := newLeader(t)
	n := 2*maxExpiresPerTick + 100
	for i := range n {
		h.lm.Apply(0, fsm.Envelope{ID: fsm.RequestID{Node: 3, Seq: uint64(i + 1)}, Cmd: fsm.Command{Op: fsm.OpGrant, Key: fmt.Sprintf("k%06d", i), LeaseMS: 1000}}, 2)
	}
	count := func(s string) int { return strings.Count(s, "propose Expire") }
	for i, want := range []int{maxExpiresPerTick, maxExpiresPerTick, 100, 0} {
		if got := count(h.tick(time.Second + time.Duration(i)*ms)); got != want {
			t.Fatalf("tick %d proposed %d Expires, want %d", i, got, want)
		}
	}
	again := 0
	for i := range 3 {
		again += count(h.tick(2*time.Second + time.Duration(10+i)*ms))
	}
	if again != n {
		t.Fatalf("a second later %d Expires were proposed again over three ticks, want all %d (none applied)", again, n)
	}
	checkTimers(t, h.lm)
}

// Waits run out in deadline order across keys, ties by handle; a wait
// that runs out while its key's Grant is in flight (not held yet) waits
// on until the table shows the key held.
func TestWaitsRunOutInDeadlineOrder(t *testing.T) {
	h := newLeader(t)
	for i, k := range []string{"a", "b"} {
		h.submit(Request{Handle: 100 + uint64(i), Op: OpAcquire, Key: k, Lease: 10 * time.Second})
		h.commit()
	}
	wait := func(handle uint64, key string, d time.Duration) {
		h.submit(Request{Handle: handle, Op: OpAcquire, Key: key, Lease: time.Second, Wait: d})
	}
	wait(4, "a", 300*ms)
	wait(3, "b", 100*ms)
	wait(2, "a", 100*ms)
	checkTimers(t, h.lm)
	h.expect("first deadline: both, by handle", h.tick(100*ms), "read h2; read h3; waiting 1")
	h.expect("last", h.tick(300*ms), "read h4; waiting 0")
	checkTimers(t, h.lm)

	// A free key with a Grant in flight: the waiter waits past its deadline.
	h2 := newLM(t, "")
	h2.lead(2)
	h2.submit(Request{Handle: 100, Op: OpAcquire, Key: "k", Lease: time.Second})
	h2.submit(Request{Handle: 5, Op: OpAcquire, Key: "k", Lease: time.Second, Wait: 50 * ms})
	h2.expect("deadline, Grant not applied", h2.tick(60*ms), "")
	h2.expect("grant applies", h2.commit(), "h100: token 1")
	h2.expect("next tick: held now", h2.tick(61*ms), "read h5; waiting 0")
	checkTimers(t, h2.lm)
}

// BenchmarkTickWithHeldLocks is a leader's idle tick with a table of n
// locks whose leases are far from running out: its cost must not grow with
// n (results/scale.md).
func BenchmarkTickWithHeldLocks(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			lm := NewLockManager(1, "", 0)
			lm.Become(true, 2, 1)
			lm.AppliedEntry(1, 2)
			for i := range n {
				lm.Apply(0, fsm.Envelope{ID: fsm.RequestID{Node: 3, Seq: uint64(i + 1)}, Cmd: fsm.Command{Op: fsm.OpGrant, Key: fmt.Sprintf("key-%07d", i), LeaseMS: 3_600_000}}, 2)
			}
			b.ResetTimer()
			for i := range b.N {
				lm.Tick(time.Duration(i) * 20 * ms)
			}
		})
	}
}

// The lease table stays in step with the lock table through random
// grants, renewals, releases and expiries, on several keys at once, with
// the slots of removed leases reused: checkTimers after every step.
func TestLeaseTableStaysInStepWithTheTable(t *testing.T) {
	h := newLeader(t)
	rng := rand.New(rand.NewPCG(3, 4))
	seq := uint64(0)
	apply := func(c fsm.Command) {
		seq++
		h.lm.Apply(time.Duration(seq)*ms, fsm.Envelope{ID: fsm.RequestID{Node: 3, Seq: seq}, Cmd: c}, 2)
	}
	for step := range 3000 {
		key := fmt.Sprintf("k%02d", rng.IntN(40))
		l, held := h.lm.machine.Get(key)
		switch r := rng.IntN(4); {
		case !held:
			apply(fsm.Command{Op: fsm.OpGrant, Key: key, LeaseMS: uint64(1 + rng.IntN(3))})
		case r == 0:
			apply(fsm.Command{Op: fsm.OpRenew, Key: key, Token: l.Token, LeaseMS: uint64(1 + rng.IntN(3))})
		case r == 1:
			apply(fsm.Command{Op: fsm.OpRelease, Key: key})
		default:
			apply(fsm.Command{Op: fsm.OpExpire, Key: key, Token: l.Token})
		}
		checkTimers(t, h.lm)
		if step%100 == 0 {
			// Every lease's deadline, read by key, is its last grant's or renewal's.
			h.lm.machine.Range(func(hd fsm.Handle, l fsm.Lock) {
				ls, ok := h.lm.leases.get(hd)
				if !ok || ls.length != time.Duration(l.LeaseMS)*ms {
					t.Fatalf("lease of handle %x: %+v %v, lock %+v", hd, ls, ok, l)
				}
			})
		}
	}
}

// BenchmarkCollectWithMillionLeases measures a full garbage collection
// with a lock manager holding a million locks of 250-byte keys: the table
// and the leases together, and every key still a change since the last
// snapshot (none was taken), as after a fill (results/scale.md).
//
//	go test ./member -run XXX -bench CollectWithMillionLeases -benchtime 10x
func BenchmarkCollectWithMillionLeases(b *testing.B) {
	lm := NewLockManager(1, "", 0)
	pad := strings.Repeat("p", 250-20)
	for i := range 1_000_000 {
		lm.Apply(0, fsm.Envelope{ID: fsm.RequestID{Node: 3, Seq: uint64(i + 1)}, Cmd: fsm.Command{Op: fsm.OpGrant, Key: fmt.Sprintf("held/%012d/%s", i, pad), LeaseMS: 3_600_000, Owner: "host:1234"}}, 2)
	}
	gccost.Report(b, lm)
}

// BenchmarkGrantReleaseWithHeldLocks is one lock granted and released by
// a follower's apply (the table and the lease queue, no proposals) beside
// n held locks of 250-byte keys whose hour-long leases sit in the queue:
// at a million, the queue's sifts are the cost that grows (log n levels,
// each a cache miss) (results/scale.md).
//
//	go test ./member -run XXX -bench GrantReleaseWithHeldLocks
func BenchmarkGrantReleaseWithHeldLocks(b *testing.B) {
	pad := strings.Repeat("p", 250-20)
	for _, n := range []int{0, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			lm := NewLockManager(1, "", 0)
			seq := uint64(0)
			apply := func(now time.Duration, c fsm.Command) {
				seq++
				lm.Apply(now, fsm.Envelope{ID: fsm.RequestID{Node: 3, Seq: seq}, Cmd: c}, 2)
			}
			for i := range n {
				apply(time.Duration(i)*time.Microsecond, fsm.Command{Op: fsm.OpGrant, Key: fmt.Sprintf("held/%012d/%s", i, pad), LeaseMS: 3_600_000})
			}
			now := time.Duration(n) * time.Microsecond
			b.ResetTimer()
			for i := range b.N {
				now += 10 * time.Microsecond
				grantAndRelease(lm, fmt.Sprintf("busy/%012d/%s", i, pad), now, &seq)
				if i%5000 == 0 { // a member freezes its table every 1,000 entries of a few commands each
					lm.machine.FreezeChanges()
				}
			}
		})
	}
}

// grantAndRelease applies a grant of key and its release: the loop of
// BenchmarkGrantReleaseWithHeldLocks, apart for a profile to focus on.
func grantAndRelease(lm *LockManager, key string, now time.Duration, seq *uint64) {
	*seq++
	lm.Apply(now, fsm.Envelope{ID: fsm.RequestID{Node: 3, Seq: *seq}, Cmd: fsm.Command{Op: fsm.OpGrant, Key: key, LeaseMS: 10_000}}, 2)
	*seq++
	lm.Apply(now, fsm.Envelope{ID: fsm.RequestID{Node: 3, Seq: *seq}, Cmd: fsm.Command{Op: fsm.OpRelease, Key: key}}, 2)
}

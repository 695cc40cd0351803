package member

import (
	"testing"
	"time"
)

func acquireOn(key string, handle uint64, wait time.Duration) Request {
	return Request{Handle: handle, Op: OpAcquire, Key: key, Lease: time.Second, Wait: wait}
}

// holdKeys grants keys (tokens 1, 2, ... in order; handles 200 and up)
// and applies the grants.
func holdKeys(h *lmHarness, keys ...string) {
	for i, k := range keys {
		h.submit(acquireOn(k, 200+uint64(i), 0))
	}
	h.commitAll()
}

// queue queues acquires of key, with the given handles, that wait 5s.
func queue(h *lmHarness, key string, handles ...uint64) {
	for _, hd := range handles {
		h.submit(acquireOn(key, hd, 5*time.Second))
	}
}

// Every limit of the lock manager: the call past it is answered Overloaded
// before anything is proposed or queued, and the calls within it are
// decided as without limits.
func TestLockManagerLimits(t *testing.T) {
	wait := 5 * time.Second
	for _, tc := range []struct {
		name   string
		limits Limits
		setup  func(h *lmHarness)
		call   Request
		want   string
	}{{
		name:   "waiters per key: the one past the limit",
		limits: Limits{MaxWaitersPerKey: 2},
		setup:  func(h *lmHarness) { holdKeys(h, "k"); queue(h, "k", 101, 102) },
		call:   acquireOn("k", 1, wait),
		want:   "h1: Overloaded",
	}, {
		name:   "waiters per key: another key still queues",
		limits: Limits{MaxWaitersPerKey: 2},
		setup:  func(h *lmHarness) { holdKeys(h, "k", "j"); queue(h, "k", 101, 102) },
		call:   acquireOn("j", 1, wait),
		want:   "waiting 3",
	}, {
		name:   "waiters in total",
		limits: Limits{MaxWaiters: 2},
		setup:  func(h *lmHarness) { holdKeys(h, "k", "j"); queue(h, "k", 101); queue(h, "j", 102) },
		call:   acquireOn("j", 1, wait),
		want:   "h1: Overloaded",
	}, {
		name:   "waiters in total: a try-acquire of a held key is not a waiter",
		limits: Limits{MaxWaiters: 1},
		setup:  func(h *lmHarness) { holdKeys(h, "k"); queue(h, "k", 101) },
		call:   acquireOn("k", 1, 0),
		want:   "read h1",
	}, {
		name:   "waiters: a slot freed by a granted waiter is reused",
		limits: Limits{MaxWaitersPerKey: 1},
		setup: func(h *lmHarness) {
			holdKeys(h, "k")
			queue(h, "k", 101)
			h.submit(Request{Handle: 104, Op: OpRelease, Key: "k", Token: 1})
			h.commitAll()
		},
		call: acquireOn("k", 1, wait),
		want: "waiting 1",
	}, {
		name:   "keys: a grant of a new key at the limit",
		limits: Limits{MaxKeys: 2},
		setup:  func(h *lmHarness) { holdKeys(h, "a", "b") },
		call:   acquireOn("c", 1, 0),
		want:   "h1: Overloaded",
	}, {
		name:   "keys: grants in flight count",
		limits: Limits{MaxKeys: 2},
		setup: func(h *lmHarness) {
			h.submit(acquireOn("a", 100, 0))
			h.submit(acquireOn("b", 101, 0))
		},
		call: acquireOn("c", 1, 0),
		want: "h1: Overloaded",
	}, {
		name:   "keys: below the limit",
		limits: Limits{MaxKeys: 2},
		setup:  func(h *lmHarness) { holdKeys(h, "a") },
		call:   acquireOn("c", 1, 0),
		want:   `propose Grant{"c", 1000ms}@2`,
	}, {
		name:   "keys: a released key frees its slot",
		limits: Limits{MaxKeys: 1},
		setup: func(h *lmHarness) {
			holdKeys(h, "a")
			h.submit(Request{Handle: 104, Op: OpRelease, Key: "a", Token: 1})
			h.commitAll()
		},
		call: acquireOn("c", 1, 0),
		want: `propose Grant{"c", 1000ms}@2`,
	}, {
		name:   "keys: a waiter on a held key is not a new key",
		limits: Limits{MaxKeys: 1},
		setup:  func(h *lmHarness) { holdKeys(h, "a") },
		call:   acquireOn("a", 1, wait),
		want:   "waiting 1",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newLM(t, "")
			h.lm.SetLimits(tc.limits)
			h.lead(2)
			tc.setup(h)
			h.expect(tc.name, h.submit(tc.call), tc.want)
		})
	}
}

// Waiting is a counter: it must equal the queues whatever path removed a
// waiter (granted, timed out, abandoned, leadership lost).
func TestWaitingCountFollowsTheQueues(t *testing.T) {
	h := newLeader(t)
	count := func(what string) {
		t.Helper()
		n := 0
		for _, q := range h.lm.waiters {
			n += len(q)
		}
		if h.lm.Waiting() != n {
			t.Fatalf("%s: Waiting() = %d, queues hold %d", what, h.lm.Waiting(), n)
		}
	}
	h.submit(acquireOn("k", 100, 0))
	h.commit()
	for i := range uint64(4) {
		h.submit(acquireOn("k", 1+i, time.Duration(i+1)*time.Second))
	}
	count("four queued")
	h.do(func() { h.lm.Abandon(2, "", 0) })
	count("one abandoned")
	h.tick(1500 * ms) // lease of token 1 runs out and waiter 1's wait too
	count("tick")
	h.commitAll()
	count("expire and grants applied")
	h.do(func() { h.lm.Become(false, 3, 2) })
	count("stepped down")
	if h.lm.Waiting() != 0 {
		t.Fatalf("a follower has %d waiters", h.lm.Waiting())
	}
}

// The core refuses a call once MaxPending calls are open in it.
func TestCoreRefusesPastMaxPending(t *testing.T) {
	lm := NewLockManager(1, "", 0)
	lm.SetLimits(Limits{MaxPending: 2})
	c := &Core{lm: lm}
	lm.Become(true, 2, 1)
	lm.AppliedEntry(1, 2)
	for h := uint64(1); h <= 2; h++ {
		if err := c.admit(); err != nil {
			t.Fatalf("call %d refused: %v", h, err)
		}
		lm.Submit(0, acquireOn("k", h, time.Second))
	}
	if err := c.admit(); errName(err) != "Overloaded" {
		t.Fatalf("third call: got %v, want Overloaded", err)
	}
	fx := lm.TakeEffects()
	lm.Apply(0, fx.Proposals[0].Env, 2)
	lm.AppliedEntry(2, 2)
	if lm.Pending() != 1 {
		t.Fatalf("pending after the grant applied: %d, want 1 (the waiter)", lm.Pending())
	}
	if err := c.admit(); err != nil {
		t.Fatalf("after a call ended: %v", err)
	}
}

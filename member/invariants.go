package member

import (
	"fmt"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/invariants"
)

// leaseChecks bounds the leases checkInvariants looks at in one call:
// each call checks the next ones round the table, so a big table costs a
// call no more than a small one, and every lease is checked in turn.
const leaseChecks = 64

// checkInvariants panics when the lock manager's bookkeeping disagrees
// with itself; only in a build with the invariants tag, and not with a
// planted bug (which may break them by design).
func (lm *LockManager) checkInvariants() {
	if !invariants.Enabled || lm.planted {
		return
	}
	if err := lm.violation(leaseChecks); err != nil {
		panic(fmt.Sprintf("member %d: invariant violated: %v", lm.id, err))
	}
}

// invariantViolation describes the first of the manager's invariants that
// does not hold, every lease checked; nil when all hold.
func (lm *LockManager) invariantViolation() error { return lm.violation(-1) }

// violation is invariantViolation with at most leases leases checked
// (negative: all), the next ones after those the last call checked.
func (lm *LockManager) violation(leases int) error {
	if err := lm.waitersViolation(); err != nil {
		return err
	}
	for key, id := range lm.inflight {
		req, ok := lm.pending[id]
		if !ok {
			return fmt.Errorf("key %q has a Grant in flight (%v) that is not pending", key, id)
		}
		if req.env.Cmd.Op != fsm.OpGrant || req.env.Cmd.Key != key {
			return fmt.Errorf("key %q's Grant in flight (%v) is pending as %v of %q", key, id, req.env.Cmd.Op, req.env.Cmd.Key)
		}
	}
	for key, ps := range lm.parked {
		_, grant := lm.inflight[key]
		_, ghost := lm.ghostReleasing[key]
		if len(ps) == 0 || !grant && !ghost {
			return fmt.Errorf("%d calls parked on key %q, which has no change in flight", len(ps), key)
		}
	}
	return lm.leases.violation(leases)
}

// waitersViolation checks the wait queues: the waiter count is their
// length, and every waiter is on the wait timers at its place.
func (lm *LockManager) waitersViolation() error {
	n := 0
	for key, q := range lm.waiters {
		if len(q) == 0 {
			return fmt.Errorf("key %q has an empty wait queue", key)
		}
		for _, w := range q {
			if w.Key != key {
				return fmt.Errorf("a waiter for %q is in %q's queue", w.Key, key)
			}
			if w.wpos < 0 || w.wpos >= len(lm.waitQ) || lm.waitQ[w.wpos] != w {
				return fmt.Errorf("a waiter for %q is not on the wait timers at its place %d", key, w.wpos)
			}
		}
		n += len(q)
	}
	if n != lm.nwaiting || len(lm.waitQ) != n {
		return fmt.Errorf("%d waiters counted, %d in the queues, %d on the wait timers", lm.nwaiting, n, len(lm.waitQ))
	}
	for i := 1; i < len(lm.waitQ); i++ {
		if lm.waitQ.Less(i, (i-1)/2) {
			return fmt.Errorf("the wait timers are out of order at %d", i)
		}
	}
	return nil
}

// violation checks the lease table against itself and its lock table:
// one lease per held lock, found by its handle, each at its place in the
// queue, which is a heap. It checks n leases of the queue (negative: all),
// from where the last call stopped.
func (t *leaseTable) violation(n int) error {
	if len(t.byLock) != len(t.q) || len(t.q) != t.machine.Len() || len(t.all) != len(t.q)+len(t.free) {
		return fmt.Errorf("%d leases indexed, %d queued (%d slots, %d free), %d locks held",
			len(t.byLock), len(t.q), len(t.all), len(t.free), t.machine.Len())
	}
	if n < 0 || n > len(t.q) {
		n = len(t.q)
	}
	for range n {
		t.checked = (t.checked + 1) % len(t.q)
		pos := t.checked
		i := t.q[pos]
		l := &t.all[i]
		if h := l.lock; t.byLock[h] != i {
			return fmt.Errorf("the lease queued at %d is not the one its lock's handle finds", pos)
		}
		if int(l.pos) != pos {
			return fmt.Errorf("the lease of %q is at %d in the queue, not at its place %d", t.key(l), pos, l.pos)
		}
		h := l.lock
		key, lock, ok := t.machine.At(h)
		if !ok || lock.Token != l.token {
			return fmt.Errorf("the lease of %q has token %d, the table %d (held %v)", key, l.token, lock.Token, ok)
		}
		if byKey, ok := t.machine.Handle(key); !ok || byKey != h {
			return fmt.Errorf("the lease of %q is not found by its key", key)
		}
		if pos > 0 && t.less(pos, (pos-1)/2) {
			return fmt.Errorf("the lease queue is out of order at %d", pos)
		}
	}
	return nil
}

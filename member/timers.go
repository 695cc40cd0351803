package member

import (
	"cmp"
	"container/heap"
	"time"
)

// The lock manager's timers: when to look at a lease again (to propose its
// Expire) and when a queued acquire's wait runs out. Both are min-heaps
// ordered by time, so a tick costs O(log n) per timer that is due and
// nothing for the rest of the table: a member holding a million locks
// ticks as cheaply as one holding ten. Ties are broken by key (leases) and
// by handle (waiters), so the order in which due timers fire, and with it
// the order of the proposals they make, is a function of the member's
// inputs alone and a simulated seed replays byte for byte.

// indexedHeap is a container/heap of items that keep their own place in
// it (setPos), so that one can be fixed or removed where it stands.
type indexedHeap[T interface {
	before(T) bool
	setPos(int)
}] []T

func (q indexedHeap[T]) Len() int           { return len(q) }
func (q indexedHeap[T]) Less(i, j int) bool { return q[i].before(q[j]) }

func (q indexedHeap[T]) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].setPos(i)
	q[j].setPos(j)
}

func (q *indexedHeap[T]) Push(x any) {
	t := x.(T)
	t.setPos(len(*q))
	*q = append(*q, t)
}

func (q *indexedHeap[T]) Pop() any {
	old := *q
	n := len(old)
	t := old[n-1]
	var zero T
	old[n-1] = zero
	t.setPos(-1)
	*q = old[:n-1]
	return t
}

// The lease queue orders leases by the time the leader should next look
// at them (lease.check): the lease's expiry at first, later the time to
// re-propose an Expire that seems lost.
func (l *lease) before(o *lease) bool {
	if l.check != o.check {
		return l.check < o.check
	}
	return l.key < o.key
}

func (l *lease) setPos(i int) { l.pos = i }

// dueLease returns the lease to look at first if its time has come.
func dueLease(q indexedHeap[*lease], now time.Duration) (*lease, bool) {
	if len(q) == 0 || q[0].check > now {
		return nil, false
	}
	return q[0], true
}

// The wait queue orders queued acquires by the time their wait runs out
// (request.checkAt), ties by handle.
func (r *request) before(o *request) bool {
	if r.checkAt != o.checkAt {
		return r.checkAt < o.checkAt
	}
	return cmp.Less(r.Handle, o.Handle)
}

func (r *request) setPos(i int) { r.wpos = i }

// setLease records key's lease as applied at local time now (rule 6) and
// schedules the leader's look at it.
func (lm *LockManager) setLease(key string, token uint64, now time.Duration, ms uint64) {
	d := time.Duration(ms) * time.Millisecond
	l, ok := lm.leases[key]
	if !ok {
		l = &lease{key: key, pos: -1}
		lm.leases[key] = l
	}
	l.token, l.deadline, l.length = token, now+d, d
	l.check = lm.hooks.expireAt(*l)
	if l.pos < 0 {
		heap.Push(&lm.leaseQ, l)
	} else {
		heap.Fix(&lm.leaseQ, l.pos)
	}
}

// deleteLease forgets key's lease (its lock is gone from the table).
func (lm *LockManager) deleteLease(key string) {
	l, ok := lm.leases[key]
	if !ok {
		return
	}
	delete(lm.leases, key)
	if l.pos >= 0 {
		heap.Remove(&lm.leaseQ, l.pos)
	}
}

// recheckLease moves key's next look to at.
func (lm *LockManager) recheckLease(l *lease, at time.Duration) {
	l.check = at
	heap.Fix(&lm.leaseQ, l.pos)
}

// queueWaiter appends req to key's FIFO queue, its wait running out at
// until.
func (lm *LockManager) queueWaiter(req *request, until time.Duration) {
	req.waitUntil, req.checkAt = until, until
	lm.waiters[req.Key] = append(lm.waiters[req.Key], req)
	lm.nwaiting++
	heap.Push(&lm.waitQ, req)
}

// unqueueWaiter takes req off the wait timers (it left its key's queue).
func (lm *LockManager) unqueueWaiter(req *request) {
	if req.wpos >= 0 {
		heap.Remove(&lm.waitQ, req.wpos)
	}
}

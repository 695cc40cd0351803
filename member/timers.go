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

// leaseQueue orders leases by the time the leader should next look at
// them (lease.check): the lease's expiry at first, later the time to
// re-propose an Expire that seems lost.
type leaseQueue []*lease

func (q leaseQueue) Len() int { return len(q) }

func (q leaseQueue) Less(i, j int) bool {
	if q[i].check != q[j].check {
		return q[i].check < q[j].check
	}
	return q[i].key < q[j].key
}

func (q leaseQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].pos, q[j].pos = i, j
}

func (q *leaseQueue) Push(x any) {
	l := x.(*lease)
	l.pos = len(*q)
	*q = append(*q, l)
}

func (q *leaseQueue) Pop() any {
	old := *q
	n := len(old)
	l := old[n-1]
	old[n-1] = nil
	l.pos = -1
	*q = old[:n-1]
	return l
}

// due returns the lease to look at first if its time has come.
func (q leaseQueue) due(now time.Duration) (*lease, bool) {
	if len(q) == 0 || q[0].check > now {
		return nil, false
	}
	return q[0], true
}

// waiterQueue orders queued acquires by the time their wait runs out
// (request.checkAt), ties by handle.
type waiterQueue []*request

func (q waiterQueue) Len() int { return len(q) }

func (q waiterQueue) Less(i, j int) bool {
	if q[i].checkAt != q[j].checkAt {
		return q[i].checkAt < q[j].checkAt
	}
	return cmp.Less(q[i].Handle, q[j].Handle)
}

func (q waiterQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].wpos, q[j].wpos = i, j
}

func (q *waiterQueue) Push(x any) {
	r := x.(*request)
	r.wpos = len(*q)
	*q = append(*q, r)
}

func (q *waiterQueue) Pop() any {
	old := *q
	n := len(old)
	r := old[n-1]
	old[n-1] = nil
	r.wpos = -1
	*q = old[:n-1]
	return r
}

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

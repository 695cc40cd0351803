package member

import (
	"cmp"
	"container/heap"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/freelist"
)

// The lock manager's timers: when to look at a lease again (to propose its
// Expire) and when a queued acquire's wait runs out. Both are min-heaps
// ordered by time, so a tick costs O(log n) per timer that is due and
// nothing for the rest of the table: a member holding a million locks
// ticks as cheaply as one holding ten. Ties are broken by key (leases) and
// by handle (waiters), so the order in which due timers fire, and with it
// the order of the proposals they make, is a function of the member's
// inputs alone and a simulated seed replays byte for byte.
//
// The leases, one per held lock, are kept where the garbage collector
// does not look (leaseTable), as the table itself is: a million of them
// add nothing to a collection's marking.

// lease is one held lock's lease on this member's clock (rule 6).
type lease struct {
	lock     fsm.Handle // the lock in the table
	token    uint64
	deadline time.Duration
	length   time.Duration
	// check is when the leader looks at this lease next (its expiry, or
	// when to re-propose an Expire that seems lost), and pos its place in
	// the leaseTable's queue.
	check time.Duration
	pos   int32
	// shown: a read answered this hold (LockManager.show); a renewal of
	// the same token keeps it.
	shown bool
}

// leaseTable holds the leases of a table's locks, found by the lock's
// handle, and queues them by check time, ties by key. It holds no pointer
// per lease: the leases are a slice, the queue a slice of their places in
// it, and the index a map of integers.
type leaseTable struct {
	machine *fsm.Machine // the table whose locks the leases are of
	byLock  map[fsm.Handle]int32
	all     []lease
	free    []int32
	q       []int32 // places in all, a min-heap by (check, key)
	checked int     // the queue place the invariant checks looked at last (invariants.go)
}

func newLeaseTable(m *fsm.Machine) leaseTable {
	return leaseTable{machine: m, byLock: make(map[fsm.Handle]int32, m.Len())}
}

func (t *leaseTable) len() int { return len(t.q) }

// get returns the lease of the lock h names. The pointer is good until the
// next set.
func (t *leaseTable) get(h fsm.Handle) (*lease, bool) {
	i, ok := t.byLock[h]
	if !ok {
		return nil, false
	}
	return &t.all[i], true
}

// set records l (for its lock, l.lock), replacing the lock's lease if it
// had one, and puts it in its place in the queue.
func (t *leaseTable) set(l lease) {
	if i, ok := t.byLock[l.lock]; ok {
		l.pos = t.all[i].pos
		l.shown = l.shown || (t.all[i].shown && t.all[i].token == l.token)
		t.all[i] = l
		t.fix(int(l.pos))
		return
	}
	i := freelist.Take(&t.all, &t.free)
	l.pos = int32(len(t.q))
	t.all[i] = l
	t.byLock[l.lock] = i
	t.q = append(t.q, i)
	t.up(len(t.q) - 1)
}

// remove forgets the lease of the lock h named (the lock is gone).
func (t *leaseTable) remove(h fsm.Handle) {
	i, ok := t.byLock[h]
	if !ok {
		return
	}
	delete(t.byLock, h)
	pos, last := int(t.all[i].pos), len(t.q)-1
	if pos != last {
		t.swap(pos, last)
	}
	t.q = t.q[:last]
	if pos != last {
		t.fix(pos)
	}
	t.all[i] = lease{}
	t.free = append(t.free, i)
}

// recheck moves l's next look to at.
func (t *leaseTable) recheck(l *lease, at time.Duration) {
	l.check = at
	t.fix(int(l.pos))
}

// due returns the lease to look at first if its time has come.
func (t *leaseTable) due(now time.Duration) (*lease, bool) {
	if len(t.q) == 0 || t.all[t.q[0]].check > now {
		return nil, false
	}
	return &t.all[t.q[0]], true
}

// key returns the key of l's lock.
func (t *leaseTable) key(l *lease) string {
	k, _, _ := t.machine.At(l.lock)
	return k
}

func (t *leaseTable) less(a, b int) bool {
	la, lb := &t.all[t.q[a]], &t.all[t.q[b]]
	if la.check != lb.check {
		return la.check < lb.check
	}
	return t.key(la) < t.key(lb)
}

func (t *leaseTable) swap(a, b int) {
	t.q[a], t.q[b] = t.q[b], t.q[a]
	t.all[t.q[a]].pos = int32(a)
	t.all[t.q[b]].pos = int32(b)
}

func (t *leaseTable) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !t.less(j, p) {
			return
		}
		t.swap(j, p)
		j = p
	}
}

func (t *leaseTable) down(i int) bool {
	start := i
	for {
		c := 2*i + 1
		if c >= len(t.q) {
			break
		}
		if r := c + 1; r < len(t.q) && t.less(r, c) {
			c = r
		}
		if !t.less(c, i) {
			break
		}
		t.swap(i, c)
		i = c
	}
	return i > start
}

func (t *leaseTable) fix(i int) {
	if !t.down(i) {
		t.up(i)
	}
}

// init orders the queue after its leases were appended in any order: O(n).
func (t *leaseTable) init() {
	for i := len(t.q)/2 - 1; i >= 0; i-- {
		t.down(i)
	}
}

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

// The wait queue orders queued acquires by the time their wait runs out
// (request.checkAt), ties by handle.
func (r *request) before(o *request) bool {
	if r.checkAt != o.checkAt {
		return r.checkAt < o.checkAt
	}
	return cmp.Less(r.Handle, o.Handle)
}

func (r *request) setPos(i int) { r.wpos = i }

// setLease records the lease of the lock h names as applied at local time
// now (rule 6) and schedules the leader's look at it.
func (lm *LockManager) setLease(h fsm.Handle, token uint64, now time.Duration, ms uint64) {
	d := time.Duration(ms) * time.Millisecond
	l := lease{lock: h, token: token, deadline: now + d, length: d}
	l.check = lm.hooks.expireAt(l)
	lm.leases.set(l)
}

// leaseOf returns the lease of key's lock, if key is held.
func (lm *LockManager) leaseOf(key string) (*lease, bool) {
	h, ok := lm.machine.Handle(key)
	if !ok {
		return nil, false
	}
	return lm.leases.get(h)
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

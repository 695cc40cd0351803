package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/internal/retry"
	"github.com/raftlock/raftlock/member"
)

// client is one workload client, the chaos workload's worker as a state
// machine on the event queue: acquires with and without a wait, a critical
// section on the fenced store (sometimes pausing past the lease), renewals,
// releases, and reads. Like the real client it retries what is safe to
// retry (Unavailable, not the leader, a refused connection) on another
// member within the operation's deadline, and records an operation whose
// outcome it cannot know as info, then takes a new process id.
type client struct {
	s    *sim
	idx  int
	rng  *rand.Rand
	proc history.Process
	pref uint64 // the member it asks first
	cur  *op
	busy bool // in an operation or a critical section
	// lastArrival keeps each client-to-member stream in order, as one TCP
	// connection does: an abandon never overtakes its request.
	lastArrival map[uint64]int64
	reads       []string // final reads still to do
	// filler: a client of the fill (fill.go). Its requests arrive
	// batched, it asks first the member that last answered it, and its
	// operations do not count toward MaxOps. held are the keys it has
	// still to take, took those it took.
	filler bool
	held   []string
	took   int
	// backups: the backup taker (backup.go), whose operations are not in
	// the history.
	backups bool
	// acquires counts the client's acquires: each records an owner of
	// its own, by which the client recognises its lock when the outcome
	// was unknown.
	acquires int
}

// op is one history operation, possibly several attempts.
type op struct {
	c            *client
	f, key       string
	req          member.Request
	deadline     int64
	lockChanging bool
	done         bool
	att          *attempt // outstanding request; nil while backing off
	tries        int
	redirects    int    // followed at once so far (retry.MaxRedirects)
	next         uint64 // member to try next
	by           uint64 // the member whose answer completed it
	then         func(typ string, a member.Answer)
}

// attempt is one request to one member.
type attempt struct {
	c      *client
	op     *op
	node   *node
	handle uint64
}

// newClient makes client idx, with its own random stream, so that one
// client's choices do not shift when another's change.
func (s *sim) newClient(idx int) *client {
	return &client{s: s, idx: idx, rng: workload.Rand(s.cfg.Seed, idx), proc: s.newProc(),
		pref: uint64(idx%s.cfg.Nodes) + 1, lastArrival: map[uint64]int64{}}
}

// next starts the client's next operation, unless the workload is over.
func (c *client) next() {
	s := c.s
	c.busy = false
	if c.filler {
		if len(c.held) > 0 {
			c.nextHeld()
		}
		return
	}
	if len(c.reads) > 0 {
		key := c.reads[0]
		c.reads = c.reads[1:]
		c.busy = true
		c.get(key)
		return
	}
	if s.stopOps || (s.cfg.MaxOps > 0 && s.opsStarted >= s.cfg.MaxOps) {
		return
	}
	c.busy = true
	switch kind, key := s.plan().Next(c.r()); kind {
	case workload.Get:
		c.get(key)
	case workload.ForceRelease:
		c.forceRelease(key)
	case workload.List:
		c.list()
	default:
		c.cycle(key)
	}
}

// plan is the workload's plan, which the chaos harness's clients follow too.
func (s *sim) plan() workload.Plan {
	return workload.Plan{Keys: s.keys, LeaseMin: s.cfg.LeaseMin, LeaseMax: s.cfg.LeaseMax}
}

// list reads a page of the table.
func (c *client) list() {
	after, limit := c.s.plan().Page(c.r())
	c.start(history.OpList, "", member.Request{Op: member.OpList, After: after, Limit: limit}, workload.OpTimeout,
		history.Value{After: after, Limit: history.Ptr(int64(limit))}, func(string, member.Answer) { c.later() })
}

// owner is what the client's next acquire records as its owner.
func (c *client) owner() string { return fmt.Sprintf("sim-%d.%d", c.idx, c.acquires) }

// forceRelease is an operator freeing key whatever holds it (rule 12).
func (c *client) forceRelease(key string) {
	c.start(history.OpRelease, key, member.Request{Op: member.OpRelease, Key: key, Force: true}, workload.OpTimeout,
		history.Value{Force: true}, func(string, member.Answer) { c.later() })
}

func (c *client) r() *rand.Rand { return c.rng }

// later continues the client after a think time of up to 20ms.
func (c *client) later() {
	c.busy = true
	c.s.sch.after(int64(c.r().IntN(20))*int64(time.Millisecond)+1, c.next)
}

func (c *client) get(key string) {
	c.start(history.OpGet, key, member.Request{Op: member.OpGet, Key: key}, workload.OpTimeout,
		history.Value{}, func(typ string, a member.Answer) { c.later() })
}

// cycle acquires key and, holding it, runs a critical section on the
// fenced store, sometimes pausing past its lease, sometimes renewing,
// usually releasing.
func (c *client) cycle(key string) {
	r, plan := c.r(), c.s.plan()
	lease, wait := plan.Acquire(r)
	owner := c.owner()
	c.acquires++
	c.start(history.OpAcquire, key, member.Request{Op: member.OpAcquire, Key: key, Lease: lease, Wait: wait, Owner: owner}, wait+workload.OpTimeout,
		history.Value{LeaseMS: history.Ptr(lease.Milliseconds()), WaitMS: history.Ptr(wait.Milliseconds()), Owner: owner},
		func(typ string, a member.Answer) {
			switch typ {
			case history.OK:
				c.hold(plan, key, a.Token, lease)
			case history.Info:
				c.recognise(plan, key, owner, lease)
			default:
				c.later()
			}
		})
}

// recognise does what the API docs advise a caller told "outcome unknown":
// it reads the lock, and if it holds its own owner, keeps it as its own.
func (c *client) recognise(plan workload.Plan, key, owner string, lease time.Duration) {
	c.start(history.OpGet, key, member.Request{Op: member.OpGet, Key: key}, workload.OpTimeout,
		history.Value{}, func(typ string, a member.Answer) {
			if typ != history.OK || !a.Lock.Held || a.Lock.Owner != owner {
				c.later()
				return
			}
			c.hold(plan, key, a.Lock.Token, lease)
		})
}

// hold runs the critical section of key held by token on the fenced store,
// then renews and releases.
func (c *client) hold(plan workload.Plan, key string, token uint64, lease time.Duration) {
	s, r := c.s, c.r()
	proc := c.proc
	v, ok := s.store.Read(proc, key, token)
	rest := func() {
		if ok {
			s.store.Write(proc, key, token, v+1)
		}
		c.renewAndRelease(plan, key, token, lease)
	}
	if d, stall := plan.Stall(r, lease); stall {
		s.sch.after(int64(d), rest)
		return
	}
	rest()
}

func (c *client) renewAndRelease(plan workload.Plan, key string, token uint64, lease time.Duration) {
	r := c.r()
	release := func() {
		if !plan.Release(r) {
			c.later() // let the lease run out
			return
		}
		c.start(history.OpRelease, key, member.Request{Op: member.OpRelease, Key: key, Token: token}, workload.OpTimeout,
			history.Value{Token: history.Ptr(token)}, func(string, member.Answer) { c.later() })
	}
	if plan.Renew(r) {
		c.start(history.OpRenew, key, member.Request{Op: member.OpRenew, Key: key, Token: token, Lease: lease}, workload.OpTimeout,
			history.Value{Token: history.Ptr(token), LeaseMS: history.Ptr(lease.Milliseconds())},
			func(typ string, a member.Answer) {
				if typ == history.OK || errors.Is(a.Err, member.ErrNotFound) {
					release()
					return
				}
				c.later()
			})
		return
	}
	release()
}

// start invokes an operation: it is recorded, tagged with its invoke index
// + 1 (the audit finds it in the log by that), and sent.
func (c *client) start(f, key string, req member.Request, timeout time.Duration, v history.Value, then func(string, member.Answer)) {
	s := c.s
	if !c.filler {
		s.opsStarted++
	}
	inv := s.Record(c.proc, history.Invoke, f, key, v)
	reads := f == history.OpGet || f == history.OpList
	if !reads {
		req.Tag = uint64(inv.Index) + 1
	}
	o := &op{c: c, f: f, key: key, req: req, deadline: s.sch.now + int64(timeout),
		lockChanging: !reads, next: c.pref, then: then}
	c.cur = o
	s.sch.at(o.deadline, func() { c.timeout(o) })
	c.try(o)
}

// try sends the operation's request to o.next.
func (c *client) try(o *op) {
	s := c.s
	if s.nodes[o.next-1].retired {
		o.next = s.nextMember(o.next) // removed: the client knows the members
	}
	n := s.nodes[o.next-1]
	s.nextHandle++
	a := &attempt{c: c, op: o, node: n, handle: s.nextHandle}
	o.att = a
	o.tries++
	req := o.req
	req.Handle = a.handle
	arrive := max(s.sch.now+s.clientLatency(n), c.lastArrival[n.id])
	if s.tr.on() {
		s.tr.printf("request client=%d proc=%d node=%d handle=%d %s %s", c.idx, c.proc, n.id, a.handle, o.f, o.key)
	}
	if c.filler {
		c.lastArrival[n.id] = s.arriveBatched(n, arrive, a, req)
		return
	}
	c.lastArrival[n.id] = arrive
	s.sch.at(arrive, func() {
		if !n.up() {
			// Connection refused: nothing was sent.
			s.sch.after(s.baseLatency(), func() { c.refused(a) })
			return
		}
		n.handles[a.handle] = a
		s.input(n, input{kind: inSubmit, req: req})
	})
}

// nextMember is the member after id, in id order and round again,
// skipping removed ones.
func (s *sim) nextMember(id uint64) uint64 {
	for i := 1; i <= len(s.nodes); i++ {
		if n := s.nodes[(int(id)-1+i)%len(s.nodes)]; !n.retired {
			return n.id
		}
	}
	return id
}

// abandon tells member n the requester gave up on handle (with the token
// of a grant that reached it after it left, else 0).
func (c *client) abandon(a *attempt, token uint64) {
	s := c.s
	n := a.node
	arrive := max(s.sch.now+s.clientLatency(n), c.lastArrival[n.id])
	c.lastArrival[n.id] = arrive
	if s.tr.on() {
		s.tr.printf("abandon client=%d node=%d handle=%d token=%d", c.idx, n.id, a.handle, token)
	}
	s.sch.at(arrive, func() {
		delete(n.handles, a.handle)
		s.input(n, input{kind: inAbandon, handle: a.handle, key: a.op.key, token: token})
	})
}

func (c *client) current(a *attempt) bool { return !a.op.done && a.op.att == a }

// answered: member's answer to attempt a reached the client.
func (c *client) answered(a *attempt, ans member.Answer) {
	o := a.op
	if !c.current(a) {
		if ans.Err == nil && o.f == history.OpAcquire && ans.Token != 0 {
			c.abandon(a, ans.Token) // a ghost grant: give it back
		}
		return
	}
	o.by = a.node.id
	var nl *member.NotLeaderError
	var inv *member.InvalidArgumentError
	switch {
	case ans.Err == nil:
		if c.filler {
			c.pref = a.node.id
		}
		v := history.Value{}
		switch {
		case o.f == history.OpAcquire, o.req.Force:
			v.Token = history.Ptr(ans.Token)
		case o.f == history.OpList:
			v.More = history.Ptr(ans.List.More)
			for _, l := range ans.List.Locks {
				v.Locks = append(v.Locks, history.ListedLock{Key: l.Key, Token: l.Token, Owner: l.Owner})
			}
		case o.f == history.OpGet:
			v.Held = history.Ptr(ans.Lock.Held)
			if ans.Lock.Held {
				v.Token, v.Owner = history.Ptr(ans.Lock.Token), ans.Lock.Owner
			}
		}
		c.complete(o, history.OK, v, ans)
	case errors.Is(ans.Err, member.ErrHeld):
		c.complete(o, history.Fail, history.Value{Error: "held"}, ans)
	case errors.Is(ans.Err, member.ErrNotFound):
		c.complete(o, history.Fail, history.Value{Error: "not-found"}, ans)
	case errors.As(ans.Err, &nl) && nl.LeaderID != 0 && nl.LeaderID != a.node.id && int(nl.LeaderID) <= len(c.s.nodes):
		c.decide(a, retry.Redirected, nl.LeaderID)
	case errors.As(ans.Err, &nl), errors.Is(ans.Err, member.ErrUnavailable), errors.Is(ans.Err, member.ErrStopped):
		c.decide(a, retry.Unavailable, 0)
	case errors.Is(ans.Err, member.ErrOverloaded):
		c.decide(a, retry.Overloaded, 0)
	case errors.Is(ans.Err, member.ErrGrantRejected):
		c.complete(o, history.Fail, history.Value{Error: "grant-rejected"}, ans)
	case errors.As(ans.Err, &inv):
		c.complete(o, history.Fail, history.Value{Error: "invalid-argument"}, ans)
	default: // outcome unknown, or anything else: it may have happened
		c.unknown(o, ans.Err.Error(), ans)
	}
}

// unknown ends o as info (a read as a failure: it changed nothing).
func (c *client) unknown(o *op, why string, ans member.Answer) {
	if !o.lockChanging {
		c.complete(o, history.Fail, history.Value{Error: "unavailable"}, ans)
		return
	}
	c.complete(o, history.Info, history.Value{Error: why}, ans)
}

// decide carries out the retry policy the real clients follow
// (retry.Decide) after attempt a came to outcome; leader is the member a
// redirect named.
func (c *client) decide(a *attempt, outcome retry.Outcome, leader uint64) {
	o := a.op
	switch retry.Decide(outcome, !o.lockChanging, o.redirects) {
	case retry.Follow:
		o.redirects++
		c.retryAfter(o, leader, 0) // a redirect is an answer, not a failure: no backoff
	case retry.FollowLater:
		o.redirects++
		c.retry(o, leader)
	case retry.Again:
		c.retry(o, a.node.id)
	case retry.Next:
		c.retry(o, c.s.nextMember(a.node.id))
	case retry.Unknown:
		c.unknown(o, "connection lost", member.Answer{})
	}
}

// retry tries member next after a backoff, within the deadline.
func (c *client) retry(o *op, next uint64) {
	c.retryAfter(o, next, int64(10*time.Millisecond)+int64(c.r().IntN(20*o.tries))*int64(time.Millisecond))
}

// retryAfter tries member next after backoff, within the deadline.
func (c *client) retryAfter(o *op, next uint64, backoff int64) {
	s := c.s
	o.att = nil
	if s.sch.now+backoff >= o.deadline {
		c.complete(o, history.Fail, history.Value{Error: "unavailable"}, member.Answer{})
		return
	}
	o.next = next
	s.sch.after(backoff, func() {
		if !o.done {
			c.try(o)
		}
	})
}

// refused: the member was down when the request arrived; nothing happened.
func (c *client) refused(a *attempt) {
	if c.current(a) {
		c.decide(a, retry.NotSent, 0)
	}
}

// broken: the member died with the request pending. A read is retried; a
// lock-changing request's outcome is unknown.
func (c *client) broken(a *attempt) {
	if c.current(a) {
		c.decide(a, retry.Lost, 0)
	}
}

// timeout: the operation's deadline passed.
func (c *client) timeout(o *op) {
	if o.done {
		return
	}
	if o.att == nil {
		c.complete(o, history.Fail, history.Value{Error: "unavailable"}, member.Answer{})
		return
	}
	a := o.att
	c.abandon(a, 0)
	c.unknown(o, "timeout", member.Answer{})
}

func (c *client) complete(o *op, typ string, v history.Value, ans member.Answer) {
	s := c.s
	o.done = true
	o.att = nil
	if c.backups {
		o.then(typ, ans)
		return
	}
	s.Record(c.proc, typ, o.f, o.key, v)
	s.stats.Ops++
	switch typ {
	case history.OK:
		s.stats.OK++
	case history.Fail:
		s.stats.Fail++
	case history.Info:
		s.stats.Info++
		c.proc = s.newProc() // a process never issues again after an info
	}
	o.then(typ, ans)
}

// clientsIdle: no client is in an operation or a critical section.
func (s *sim) clientsIdle() bool {
	for _, c := range s.clients {
		if c.busy {
			return false
		}
	}
	return true
}

// finalReads reads every key once, after healing, from a fresh process.
func (s *sim) finalReads() {
	c := s.newClient(len(s.clients))
	c.reads = append([]string(nil), s.keys...)
	if l := s.leader(); l != nil {
		c.pref = l.id
	}
	s.clients = append(s.clients, c)
	c.next()
	deadline := s.sch.now + int64(20*time.Second)
	s.sch.runUntil(deadline, func() bool { return !c.busy })
}

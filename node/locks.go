package node

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// request is one client call waiting for its command to apply.
type request struct {
	env       fsm.Envelope
	done      chan outcome // buffered: apply never blocks on a caller
	proposed  bool
	cancelled bool // the requester is gone (rule 7)
	delivered bool
	result    fsm.Result
	waitUntil time.Duration // queued acquires: when to give up
}

type outcome struct {
	res fsm.Result
	err error
}

type lease struct {
	token    uint64
	deadline time.Duration
	length   time.Duration
}

func newLease(token uint64, now time.Duration, ms uint64) lease {
	d := time.Duration(ms) * time.Millisecond
	return lease{token: token, deadline: now + d, length: d}
}

type expireMark struct {
	token uint64
	at    time.Duration
}

// lockManager holds the applied lock table and every leader-side decision
// about it (DESIGN.md section 2, rules 3 to 7). All of its state is guarded
// by Node.mu; its methods named ...Locked expect the lock held.
type lockManager struct {
	machine     *fsm.Machine
	applied     uint64
	appliedTerm uint64
	appliedCh   chan struct{} // closed and replaced whenever applied moves
	appliedAt   time.Duration // node clock when applied last moved

	leases   map[string]lease // every node, local clock (rule 6)
	pending  map[fsm.RequestID]*request
	inflight map[string]fsm.RequestID // proposed Grant per key (rule 4)
	renewing map[string]int           // proposed Renews per key
	waiters  map[string][]*request    // FIFO per key
	expiring map[string]expireMark

	leader   bool
	term     uint64
	leaderID uint64
	barrier  bool // applied an entry of our own term (rule 3)
	seq      uint64
}

// newLockManager returns an empty manager; restoreLocked installs its table.
func newLockManager(seqStart uint64) *lockManager {
	return &lockManager{
		appliedCh: make(chan struct{}), pending: make(map[fsm.RequestID]*request),
		inflight: make(map[string]fsm.RequestID), renewing: make(map[string]int), waiters: make(map[string][]*request),
		expiring: make(map[string]expireMark), seq: seqStart,
	}
}

// leaderReadyLocked says whether this node may make lock decisions now.
func (n *Node) leaderReadyLocked() error {
	lm := n.lm
	if n.stopped {
		return ErrStopped
	}
	if !lm.leader {
		return &NotLeaderError{LeaderID: lm.leaderID, LeaderAddr: n.transport.PeerClientAddr(lm.leaderID)}
	}
	if !lm.barrier && n.hooks.termBarrier {
		return ErrUnavailable
	}
	return nil
}

func (n *Node) newRequestLocked(cmd fsm.Command, tag uint64) *request {
	n.lm.seq++
	return &request{
		env:  fsm.Envelope{ID: fsm.RequestID{Node: n.cfg.ID, Seq: n.lm.seq}, Tag: tag, Cmd: cmd},
		done: make(chan outcome, 1),
	}
}

// proposeLocked queues req's command for the next log entry. Queuing under
// Node.mu keeps the log order equal to the order decisions were made in.
func (n *Node) proposeLocked(req *request) {
	req.proposed = true
	if req.env.Cmd.Op == fsm.OpRenew {
		n.lm.renewing[req.env.Cmd.Key]++
	}
	if req.env.Cmd.Op == fsm.OpGrant {
		n.lm.inflight[req.env.Cmd.Key] = req.env.ID
		if tok := n.hooks.proposedToken(n.lm.machine.LastToken(), len(n.lm.inflight)); tok != 0 {
			req.env.Tag = tok
		}
	}
	n.lm.pending[req.env.ID] = req
	n.enqueueLocked(req.env)
	if res, ok := n.hooks.answerAtPropose(req.env.Cmd, n.lm.machine.LastToken()); ok {
		n.deliverLocked(req, res, nil)
	}
}

// proposeInternalLocked queues a command no caller waits for (Expire, a
// ghost Release).
func (n *Node) proposeInternalLocked(cmd fsm.Command) {
	n.lm.seq++
	n.enqueueLocked(fsm.Envelope{ID: fsm.RequestID{Node: n.cfg.ID, Seq: n.lm.seq}, Cmd: cmd})
}

func (n *Node) deliverLocked(req *request, res fsm.Result, err error) {
	if req.delivered {
		return
	}
	req.delivered, req.result = true, res
	req.done <- outcome{res: res, err: err}
}

// wait blocks until req has an outcome or ctx ends. A caller that leaves
// before the outcome is a requester gone (rule 7).
func (n *Node) wait(ctx context.Context, req *request) (fsm.Result, error) {
	select {
	case o := <-req.done:
		return o.res, o.err
	case <-ctx.Done():
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	req.cancelled = true
	if !req.proposed {
		n.removeWaiterLocked(req)
	} else if req.delivered && req.result.Status == fsm.Granted && req.env.Cmd.Op == fsm.OpGrant {
		// Granted raced with the cancellation: nobody will use this lock.
		n.releaseGhostLocked(req.env.Cmd.Key, req.result.Token)
	}
	return fsm.Result{}, ctx.Err()
}

func (n *Node) removeWaiterLocked(req *request) {
	key := req.env.Cmd.Key
	q := n.lm.waiters[key]
	for i, w := range q {
		if w == req {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(n.lm.waiters, key)
	} else {
		n.lm.waiters[key] = q
	}
}

// canGrantLocked: k is free in the applied state, no Grant for it is in
// flight, and nobody queued before us (FIFO).
func (n *Node) canGrantLocked(key string, ignoreWaiters bool) bool {
	if _, held := n.lm.machine.Get(key); held {
		return false
	}
	if _, ok := n.lm.inflight[key]; ok {
		return false
	}
	return ignoreWaiters || len(n.lm.waiters[key]) == 0
}

// holdsLocked: the applied state shows key held by token and no Grant for
// key is in flight (rule 5).
func (n *Node) holdsLocked(key string, token uint64) bool {
	l, held := n.lm.machine.Get(key)
	if !held || l.Token != token {
		return false
	}
	_, grant := n.lm.inflight[key]
	return !grant
}

func (n *Node) renewDoneLocked(key string) {
	if n.lm.renewing[key] <= 1 {
		delete(n.lm.renewing, key)
	} else {
		n.lm.renewing[key]--
	}
}

// releaseGhostLocked proposes Release{key} for a lock granted to a requester
// that is gone, if this node is still the leader and the lock is still that
// grant.
func (n *Node) releaseGhostLocked(key string, token uint64) {
	if n.leaderReadyLocked() != nil || !n.holdsLocked(key, token) {
		return
	}
	n.log.Debug("releasing ghost lock", "key", key, "token", token)
	n.metrics.ghostReleases.Inc()
	n.proposeInternalLocked(fsm.Command{Op: fsm.OpRelease, Key: key})
}

// pumpLocked proposes a Grant for the first live waiter of key once key is
// free.
func (n *Node) pumpLocked(key string) {
	if n.leaderReadyLocked() != nil {
		return
	}
	for len(n.lm.waiters[key]) > 0 && n.canGrantLocked(key, true) {
		q := n.lm.waiters[key]
		w := q[0]
		if len(q) == 1 {
			delete(n.lm.waiters, key)
		} else {
			n.lm.waiters[key] = q[1:]
		}
		if w.cancelled {
			continue
		}
		n.proposeLocked(w)
	}
}

// applyLocked applies one committed command on this node and, on the
// leader, answers its requester and takes the decisions it triggers. It
// returns the command's result.
func (n *Node) applyLocked(env fsm.Envelope, entryTerm uint64) fsm.Result {
	lm := n.lm
	res := lm.machine.Apply(env.Cmd)
	if res.Status == fsm.Granted {
		res.Token = n.hooks.appliedToken(env, res)
	}
	n.afterApplyLocked(env, res, entryTerm)
	return res
}

func (n *Node) afterApplyLocked(env fsm.Envelope, res fsm.Result, entryTerm uint64) {
	lm := n.lm
	key := env.Cmd.Key
	now := n.clock.Now()
	n.metrics.commandsApplied.Inc()

	// Leases: every node, local clock, set at apply (rule 6).
	switch res.Status {
	case fsm.Granted, fsm.Renewed:
		lm.leases[key] = newLease(res.Token, now, env.Cmd.LeaseMS)
	case fsm.Released:
		delete(lm.leases, key)
	case fsm.Expired:
		if res.Existed {
			delete(lm.leases, key)
		}
		if m, ok := lm.expiring[key]; ok && m.token == env.Cmd.Token {
			delete(lm.expiring, key)
		}
	}

	if env.ID.Node != n.cfg.ID || !lm.leader || entryTerm != lm.term {
		return
	}
	// From here on: this leader proposed the command in its current term.
	req := lm.pending[env.ID]
	delete(lm.pending, env.ID)
	if env.Cmd.Op == fsm.OpGrant && lm.inflight[key] == env.ID {
		delete(lm.inflight, key)
	}
	if env.Cmd.Op == fsm.OpRenew {
		n.renewDoneLocked(key)
	}
	switch {
	case res.Status == fsm.Granted && (req == nil || req.cancelled):
		n.releaseGhostLocked(key, res.Token)
	case res.Status == fsm.GrantRejected:
		if req != nil {
			n.deliverLocked(req, res, ErrGrantRejected)
		}
	case req != nil && !req.cancelled:
		n.deliverLocked(req, res, nil)
	}
	if res.Status == fsm.Released || (res.Status == fsm.Expired && res.Existed) || res.Status == fsm.GrantRejected {
		n.pumpLocked(key)
	}
}

// becomeLocked records a role change. Losing leadership ends every pending
// call: a proposed one with ErrOutcomeUnknown, a queued one with
// ErrUnavailable (nothing was proposed for it).
func (n *Node) becomeLocked(leader bool, term, leaderID uint64) {
	lm := n.lm
	wasLeader, oldTerm := lm.leader, lm.term
	lm.leader, lm.term, lm.leaderID = leader, term, leaderID
	if wasLeader && (!leader || term != oldTerm) {
		for _, req := range lm.pending {
			n.deliverLocked(req, fsm.Result{}, ErrOutcomeUnknown)
		}
		for _, q := range lm.waiters {
			for _, w := range q {
				n.deliverLocked(w, fsm.Result{}, ErrUnavailable)
			}
		}
		lm.pending = make(map[fsm.RequestID]*request)
		lm.inflight = make(map[string]fsm.RequestID)
		lm.renewing = make(map[string]int)
		lm.waiters = make(map[string][]*request)
		lm.expiring = make(map[string]expireMark)
	}
	if !leader || term != oldTerm {
		lm.barrier = false
	}
}

// dropLocked answers calls whose proposal raft refused: nothing entered the
// log, so they definitely did not happen.
func (n *Node) dropLocked(envs []fsm.Envelope) {
	for _, env := range envs {
		if n.lm.inflight[env.Cmd.Key] == env.ID {
			delete(n.lm.inflight, env.Cmd.Key)
			defer n.pumpLocked(env.Cmd.Key)
		}
		if env.Cmd.Op == fsm.OpRenew && env.ID.Node == n.cfg.ID {
			n.renewDoneLocked(env.Cmd.Key)
		}
		if req, ok := n.lm.pending[env.ID]; ok {
			delete(n.lm.pending, env.ID)
			n.deliverLocked(req, fsm.Result{}, ErrUnavailable)
		}
		if m, ok := n.lm.expiring[env.Cmd.Key]; ok && env.Cmd.Op == fsm.OpExpire && m.token == env.Cmd.Token {
			delete(n.lm.expiring, env.Cmd.Key)
		}
	}
}

// restoreLocked installs a snapshot's table. Every lease restarts in full
// from now: after a restart or snapshot install a deadline is never shorter
// than a full lease (rule 6).
func (n *Node) restoreLocked(m *fsm.Machine, index, term uint64) {
	lm := n.lm
	lm.machine, lm.applied, lm.appliedTerm = m, index, term
	lm.leases = make(map[string]lease, m.Len())
	now := n.clock.Now()
	for _, k := range m.Keys() {
		l, _ := m.Get(k)
		lm.leases[k] = newLease(l.Token, now, l.LeaseMS)
	}
}

// tickLocked runs the timers: waiters whose wait ran out, and on the leader
// the Expire of every lease whose local deadline has passed.
func (n *Node) tickLocked() {
	lm := n.lm
	now := n.clock.Now()
	for key, q := range lm.waiters {
		_, held := lm.machine.Get(key)
		live := q[:0:0]
		for _, w := range q {
			if now >= w.waitUntil && !w.cancelled && held {
				w.cancelled = true
				n.deliverLocked(w, fsm.Result{}, errWaitExpired)
			}
			if !w.cancelled {
				live = append(live, w)
			}
		}
		if len(live) == 0 {
			delete(lm.waiters, key)
		} else {
			lm.waiters[key] = live
		}
	}
	for key := range lm.waiters {
		n.pumpLocked(key) // a queue on a free key with nothing in flight
	}
	if n.hooks.localExpiry {
		for key, l := range lm.leases {
			if now >= l.deadline {
				lm.machine.Apply(fsm.Command{Op: fsm.OpExpire, Key: key, Token: l.token})
				delete(lm.leases, key)
			}
		}
	}
	if n.leaderReadyLocked() != nil {
		return
	}
	for key, l := range lm.leases {
		if now < n.hooks.expireAt(l) {
			continue
		}
		if m, ok := lm.expiring[key]; ok && m.token == l.token && now-m.at < time.Second {
			continue // already proposed; re-propose only if it seems lost
		}
		if lm.renewing[key] > 0 {
			// A renewal the holder was promised is in the log ahead of
			// anything we would propose now: wait for its new deadline.
			continue
		}
		lm.expiring[key] = expireMark{token: l.token, at: now}
		n.proposeInternalLocked(n.hooks.expireCommand(key, l.token))
	}
}

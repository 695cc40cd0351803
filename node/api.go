package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/fsm"
)

// Acquire takes key for lease. With wait 0 it is a try-acquire that answers
// ErrHeld at once when the key is held; otherwise it queues (FIFO) for at
// most wait. tag is an optional client operation id carried into the log.
// A ctx that ends before the answer means the requester is gone: if the
// grant applies anyway, the leader releases it (rule 7).
func (n *Node) Acquire(ctx context.Context, key string, lease, wait time.Duration, tag uint64) (uint64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	if err := ValidateLease(lease.Milliseconds()); err != nil {
		return 0, err
	}
	for {
		tok, err := n.acquire(ctx, key, lease, wait, tag)
		if errors.Is(err, errWaitExpired) {
			// The wait ran out while the key looked held: answer as a
			// try-acquire would now, which confirms "held" first.
			wait = 0
			continue
		}
		return tok, err
	}
}

// errWaitExpired ends a queued acquire whose wait ran out; Acquire turns it
// into a confirmed answer.
var errWaitExpired = errors.New("wait expired")

func (n *Node) acquire(ctx context.Context, key string, lease, wait time.Duration, tag uint64) (uint64, error) {
	for confirmed := false; ; confirmed = true {
		n.mu.Lock()
		if err := n.leaderReadyLocked(); err != nil {
			n.mu.Unlock()
			return 0, err
		}
		_, held := n.lm.machine.Get(key)
		if n.canGrantLocked(key, false) || wait > 0 || !held || confirmed {
			break // n.mu stays locked for the decision below
		}
		n.mu.Unlock()
		// "Held" is a read of the table: confirm it is current (this node
		// still leads and has applied everything committed) before
		// answering, as Get does. A deposed leader must not answer from
		// its stale table.
		if err := n.linearize(ctx); err != nil {
			return 0, err
		}
	}
	req := n.newRequestLocked(fsm.Command{Op: fsm.OpGrant, Key: key, LeaseMS: uint64(lease.Milliseconds())}, tag)
	_, held := n.lm.machine.Get(key)
	switch {
	case n.canGrantLocked(key, false):
		n.proposeLocked(req)
	case wait <= 0 && held:
		n.mu.Unlock()
		return 0, ErrHeld
	default:
		// Queued, even a try-acquire when the key is only being granted:
		// "held" is answered only once the applied state shows it held,
		// since the Grant in flight may yet be dropped.
		req.waitUntil = n.clock.Now() + max(wait, 0)
		n.lm.waiters[key] = append(n.lm.waiters[key], req)
	}
	n.mu.Unlock()
	res, err := n.wait(ctx, req)
	if err != nil {
		return 0, err
	}
	return res.Token, nil
}

// Release gives key up; token must be the holder's (rule 5). tag, as in
// Acquire, is an optional client operation id carried into the log.
func (n *Node) Release(ctx context.Context, key string, token, tag uint64) error {
	return n.holderCall(ctx, fsm.Command{Op: fsm.OpRelease, Key: key, Token: token}, tag)
}

// Renew restarts the holder's lease at lease from now.
func (n *Node) Renew(ctx context.Context, key string, token uint64, lease time.Duration, tag uint64) error {
	if err := ValidateLease(lease.Milliseconds()); err != nil {
		return err
	}
	return n.holderCall(ctx, fsm.Command{Op: fsm.OpRenew, Key: key, Token: token, LeaseMS: uint64(lease.Milliseconds())}, tag)
}

// holderCall proposes a Release or Renew after checking, in the applied
// state, that the caller's token holds the key.
func (n *Node) holderCall(ctx context.Context, cmd fsm.Command, tag uint64) error {
	if err := ValidateKey(cmd.Key); err != nil {
		return err
	}
	for confirmed := false; ; confirmed = true {
		n.mu.Lock()
		if err := n.leaderReadyLocked(); err != nil {
			n.mu.Unlock()
			return err
		}
		// Decide on the applied state only: an Expire of this token may be
		// in the log already, but until it applies the token holds the key,
		// and a Renew queued behind it will simply apply as NotFound.
		if n.holdsLocked(cmd.Key, cmd.Token) || (cmd.Op == fsm.OpRelease && !n.hooks.releaseChecksHolder) {
			break // n.mu stays locked for the proposal below
		}
		if confirmed {
			n.mu.Unlock()
			return ErrNotFound
		}
		n.mu.Unlock()
		// "Not the holder" is a read: confirm the table is current first
		// (found by the chaos harness: a leader resumed after SIGSTOP
		// answered a renewal from the table it had before the pause).
		if err := n.linearize(ctx); err != nil {
			return err
		}
	}
	if cmd.Op == fsm.OpRelease {
		cmd.Token = 0 // Release{key}: the seed's command has no token
	}
	req := n.newRequestLocked(cmd, tag)
	n.proposeLocked(req)
	n.mu.Unlock()
	res, err := n.wait(ctx, req)
	if err != nil {
		return err
	}
	if res.Status == fsm.NotFound {
		return ErrNotFound
	}
	return nil
}

// LockInfo answers Get.
type LockInfo struct {
	Held        bool
	Token       uint64
	RemainingMS int64 // the answering node's remaining lease
}

// Get reads key. Unless stale, the read is linearizable: the leader
// confirms its leadership with a quorum (ReadIndex) and answers once it has
// applied up to that index. A stale read serves this node's applied state.
func (n *Node) Get(ctx context.Context, key string, stale bool) (LockInfo, error) {
	if err := ValidateKey(key); err != nil {
		return LockInfo{}, err
	}
	if !stale && n.hooks.linearizableReads {
		n.mu.Lock()
		err := n.leaderReadyLocked()
		n.mu.Unlock()
		if err != nil {
			return LockInfo{}, err
		}
		if err := n.linearize(ctx); err != nil {
			return LockInfo{}, err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	l, held := n.lm.machine.Get(key)
	if !held {
		return LockInfo{}, nil
	}
	info := LockInfo{Held: true, Token: l.Token}
	if ls, ok := n.lm.leases[key]; ok {
		info.RemainingMS = max(0, (ls.deadline - n.clock.Now()).Milliseconds())
	}
	return info, nil
}

// linearize returns once this node's applied table reflects every command
// committed before the call: raft's ReadIndex confirms with a quorum that
// this node still leads, then the apply loop catches up to that index.
func (n *Node) linearize(ctx context.Context) error {
	r := &readRequest{ctx: ctx, done: make(chan readDone, 1)}
	select {
	case n.readc <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	}
	var d readDone
	select {
	case d = <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	}
	if d.err != nil {
		return d.err
	}
	return n.waitApplied(ctx, d.index)
}

func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	for {
		n.mu.Lock()
		applied, ch := n.lm.applied, n.lm.appliedCh
		n.mu.Unlock()
		if applied >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopc:
			return ErrStopped
		}
	}
}

// Status describes a member; it is the same shape the client protocol and
// the HTTP /status endpoint carry.
type Status = wire.Status

// Status returns this member's view of the cluster. Applied, Digest and
// Locks are read together, so two members at the same applied index must
// report the same digest.
func (n *Node) Status() Status {
	n.statusMu.Lock()
	rs := n.status
	n.statusMu.Unlock()
	n.mu.Lock()
	st := Status{
		ID: n.cfg.ID, Addr: n.cfg.ClientAddr, Role: roleName(rs.state), Term: rs.term, Leader: rs.lead,
		Commit: rs.commit, Applied: n.lm.applied, Locks: uint64(n.lm.machine.Len()),
		LastToken: n.lm.machine.LastToken(), Digest: n.lm.machine.Digest(),
	}
	n.mu.Unlock()
	if st.Leader != 0 {
		st.LeaderAddr = n.transport.PeerClientAddr(st.Leader)
	}
	return st
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	}
	return "follower"
}

// Healthy says why this member cannot serve, as etcd's /health does: it
// stopped on an error, knows no leader, or is not applying what is
// committed. nil means healthy.
func (n *Node) Healthy() error {
	if err := n.Err(); err != nil {
		return fmt.Errorf("stopped: %w", err)
	}
	n.statusMu.Lock()
	rs := n.status
	n.statusMu.Unlock()
	if rs.lead == 0 {
		return errors.New("no leader")
	}
	n.mu.Lock()
	stopped, applied, since := n.stopped, n.lm.applied, n.clock.Now()-n.lm.appliedAt
	n.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	if stall := 10 * time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval; rs.commit > applied && since > stall {
		return fmt.Errorf("not applying: %d committed entries not applied for %v", rs.commit-applied, since.Round(time.Millisecond))
	}
	return nil
}

// Metrics returns this member's metrics.
func (n *Node) Metrics() *Metrics { return n.metrics }

// ID returns the member id.
func (n *Node) ID() uint64 { return n.cfg.ID }

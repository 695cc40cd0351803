package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/raftlock/raftlock/member"
)

// Acquire takes key for lease. With wait 0 it is a try-acquire that answers
// ErrHeld at once when the key is held; otherwise it queues (FIFO) for at
// most wait. tag is an optional client operation id carried into the log.
// A ctx that ends before the answer means the requester is gone: if the
// grant applies anyway, the leader releases it (rule 7).
func (n *Node) Acquire(ctx context.Context, key string, lease, wait time.Duration, tag uint64) (uint64, error) {
	return n.AcquireAs(ctx, key, "", lease, wait, tag)
}

// AcquireAs is Acquire with an owner (at most 128 bytes) kept with the
// lock, for get and list to show.
func (n *Node) AcquireAs(ctx context.Context, key, owner string, lease, wait time.Duration, tag uint64) (uint64, error) {
	a, err := n.call(ctx, member.Request{Op: member.OpAcquire, Key: key, Owner: owner, Lease: lease, Wait: wait, Tag: tag})
	if err != nil {
		return 0, err
	}
	return a.Token, nil
}

// ForceRelease frees key whatever its token, for an operator: the leader
// reads the holder's token from a table confirmed current and releases
// that token (rule 12). It returns the token released; ErrNotFound when
// the key was not held. The caller checks the right to do it.
func (n *Node) ForceRelease(ctx context.Context, key string, tag uint64) (uint64, error) {
	a, err := n.call(ctx, member.Request{Op: member.OpRelease, Key: key, Force: true, Tag: tag})
	return a.Token, err
}

// Release gives key up; token must be the holder's (rule 5). tag, as in
// Acquire, is an optional client operation id carried into the log.
func (n *Node) Release(ctx context.Context, key string, token, tag uint64) error {
	_, err := n.call(ctx, member.Request{Op: member.OpRelease, Key: key, Token: token, Tag: tag})
	return err
}

// Renew restarts the holder's lease at lease from now.
func (n *Node) Renew(ctx context.Context, key string, token uint64, lease time.Duration, tag uint64) error {
	_, err := n.call(ctx, member.Request{Op: member.OpRenew, Key: key, Token: token, Lease: lease, Tag: tag})
	return err
}

// Get reads key. Unless stale, the read is linearizable: the leader
// confirms its leadership with a quorum (ReadIndex) and answers once it has
// applied up to that index. A stale read serves this member's applied state.
func (n *Node) Get(ctx context.Context, key string, stale bool) (LockInfo, error) {
	a, err := n.call(ctx, member.Request{Op: member.OpGet, Key: key, Stale: stale})
	return a.Lock, err
}

// List returns a page of the held locks in key order: up to limit (0: 100;
// at most 1,000, fewer when they would not fit one answer) whose keys start
// with prefix, after the key after. Unless stale it reads as Get does.
func (n *Node) List(ctx context.Context, prefix, after string, limit int, stale bool) (member.LockList, error) {
	a, err := n.call(ctx, member.Request{Op: member.OpList, Prefix: prefix, After: after, Limit: limit, Stale: stale})
	return a.List, err
}

// call hands req to the loop and waits for its answer. A caller that leaves
// first is a requester gone (rule 7): the core is told, and a grant that
// arrived meanwhile is released.
func (n *Node) call(ctx context.Context, req member.Request) (member.Answer, error) {
	req.Handle = n.handles.Add(1)
	cl := &call{req: req, done: make(chan member.Answer, 1)}
	if err := n.enqueue(ctx, cl); err != nil {
		return member.Answer{}, err
	}
	select {
	case a := <-cl.done:
		return a, a.Err
	case <-ctx.Done():
	case <-n.loopDone:
		// The loop answered every call it had before it ended; one still
		// in the queue was never decided.
		select {
		case a := <-cl.done:
			return a, a.Err
		default:
			return member.Answer{}, ErrStopped
		}
	}
	// The caller left. Behind the call in the same queue, so the loop has
	// seen the call; it releases a grant this caller will never use.
	select {
	case n.callc <- callInput{cl: cl, abandon: true}:
	case <-n.loopDone:
	}
	return member.Answer{}, ctx.Err()
}

// Status describes a member; it is the same shape the client protocol and
// the HTTP /status endpoint carry.
type Status = member.Status

// Status returns this member's view of the cluster. Applied, Digest and
// Locks are read together, so two members at the same applied index report
// the same digest.
// A stopped member reports the status it last published; err is ctx's
// when ctx ends first.
func (n *Node) Status(ctx context.Context) (Status, error) {
	var st Status
	switch err := n.inspectContext(ctx, func(c *member.Core) { st = c.Status() }); {
	case errors.Is(err, errLoopEnded):
		n.statusMu.Lock()
		st = n.last
		n.statusMu.Unlock()
	case err != nil:
		return Status{}, err
	}
	st.Addr = n.cfg.ClientAddr
	if st.Leader != 0 {
		st.LeaderAddr = n.transport.PeerClientAddr(st.Leader)
	}
	return st, nil
}

// PeerAPIAddr is the HTTP/JSON API address member id announced to this
// one (this member's own for its id), "" when it is not known: the member
// serves none, is from before the API, or has no stream open with this
// one. The API redirects a follower's callers to the leader's.
func (n *Node) PeerAPIAddr(id uint64) string { return n.transport.PeerAPIAddr(id) }

// PeerClientAddr is the client address member id announced to this one
// (this member's own for its id), "" when it is not known.
func (n *Node) PeerClientAddr(id uint64) string {
	if id == n.cfg.ID {
		return n.cfg.ClientAddr
	}
	return n.transport.PeerClientAddr(id)
}

// Waiters returns how many acquires are queued on each of keys at this
// member, and whether it leads: only the leader queues acquires, so a
// follower's counts are all 0 and say nothing.
func (n *Node) Waiters(ctx context.Context, keys []string) (counts []int, leader bool, err error) {
	counts = make([]int, len(keys))
	err = n.inspectContext(ctx, func(c *member.Core) {
		if _, leader = c.Leader(); leader {
			for i, k := range keys {
				counts[i] = c.Waiters(k)
			}
		}
	})
	if errors.Is(err, errLoopEnded) {
		err = ErrStopped
	}
	return counts, leader, err
}

// Healthy says why this member cannot serve, as etcd's /health does: it
// stopped on an error, knows no leader, or is not applying what is
// committed, or ctx ended before its loop could tell (a loop held up, by
// a slow sync for one, is not serving either). nil means healthy.
func (n *Node) Healthy(ctx context.Context) error {
	if err := n.Err(); err != nil {
		return fmt.Errorf("stopped: %w", err)
	}
	if err := n.listenersErr(); err != nil {
		return err
	}
	var healthy error
	switch err := n.inspectContext(ctx, func(c *member.Core) { healthy = c.Healthy() }); {
	case errors.Is(err, errLoopEnded):
		return ErrStopped
	case err != nil:
		return fmt.Errorf("no answer from the member's loop: %w", err)
	}
	return healthy
}

// Metrics returns this member's metrics.
func (n *Node) Metrics() *Metrics { return n.metrics }

// ID returns the member id.
func (n *Node) ID() uint64 { return n.cfg.ID }

// appliedIndex returns the applied index (the last published one once the
// loop has ended).
func (n *Node) appliedIndex(ctx context.Context) (uint64, error) {
	st, err := n.Status(ctx)
	return st.Applied, err
}

// Logger returns the member's logger.
func (n *Node) Logger() *slog.Logger { return n.log }

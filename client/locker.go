package client

import (
	"context"
	"errors"
	"time"

	"github.com/raftlock/raftlock/internal/ending"
)

// Locker holds one lock and renews its lease in the background until Unlock
// or until the lock is lost.
type Locker struct {
	c     *Client
	key   string
	lease time.Duration
	token uint64

	lost    *ending.Ending
	stop    context.CancelFunc // ends the renewals
	stopped chan struct{}
}

// Lock acquires key (waiting up to wait) and starts renewing it every third
// of the lease.
func (c *Client) Lock(ctx context.Context, key string, lease, wait time.Duration) (*Locker, error) {
	start := time.Now()
	g, err := c.Acquire(ctx, key, lease, wait)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	l := &Locker{c: c, key: key, lease: lease, token: g.Token,
		lost: ending.New(), stop: stop, stopped: make(chan struct{})}
	go l.renewLoop(rctx, start)
	return l, nil
}

// Token is the fencing token: pass it to every resource the lock guards.
func (l *Locker) Token() uint64 { return l.token }

// Key is the locked key.
func (l *Locker) Key() string { return l.key }

// Lost is closed when the lock can no longer be trusted: the cluster said
// the token no longer holds the key, or a full lease passed without a
// successful renewal.
func (l *Locker) Lost() <-chan struct{} { return l.lost.Done() }

// Err says why the lock was lost.
func (l *Locker) Err() error { return l.lost.Err() }

// renewLoop renews the lease until Unlock ends ctx or until the lock is
// lost (KeepAlive).
func (l *Locker) renewLoop(ctx context.Context, validFrom time.Time) {
	defer close(l.stopped)
	if err := l.c.keepAlive(ctx, l.key, l.token, l.lease, validFrom); err != nil {
		l.lost.End(err)
	}
}

// ErrLeaseRanOut says a full lease passed without a successful renewal:
// the cluster may have expired the lock meanwhile, so it cannot be
// trusted any more.
var ErrLeaseRanOut = errors.New("raftlock: lease ran out before a renewal succeeded")

// KeepAlive renews the lease of key, held with token, every third of
// lease until ctx ends (it then returns nil), and returns the moment the
// lock is lost: an error wrapping ErrNotFound when the cluster answers
// that token no longer holds key (released, forced, expired), or
// ErrLeaseRanOut when a full lease passed without a renewal succeeding.
// Call it right after the acquire or renew that began the lease: the
// lease is counted from the call, and from the start of each successful
// renewal, never from its answer, so the holder's view always ends before
// the cluster's. A renewal under way when ctx ends is finished first.
func (c *Client) KeepAlive(ctx context.Context, key string, token uint64, lease time.Duration) error {
	if err := validate(key, &lease); err != nil {
		return err
	}
	return c.keepAlive(ctx, key, token, lease, time.Now())
}

// keepAlive is KeepAlive with the time the current lease was counted from.
func (c *Client) keepAlive(ctx context.Context, key string, token uint64, lease time.Duration, validFrom time.Time) error {
	t := time.NewTicker(max(lease/3, 5*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		start := time.Now()
		deadline := validFrom.Add(lease)
		rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		err := c.Renew(rctx, key, token, lease)
		cancel()
		switch {
		case err == nil:
			validFrom = start
		case errors.Is(err, ErrNotFound):
			return err
		case !time.Now().Before(deadline):
			return ErrLeaseRanOut
		}
	}
}

// Unlock stops renewing and releases the lock.
func (l *Locker) Unlock(ctx context.Context) error {
	l.stop()
	<-l.stopped
	if err := l.lost.Err(); err != nil {
		return err
	}
	return l.c.Release(ctx, l.key, l.token)
}

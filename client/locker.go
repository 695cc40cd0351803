package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Locker holds one lock and renews its lease in the background until Unlock
// or until the lock is lost.
type Locker struct {
	c     *Client
	key   string
	lease time.Duration
	token uint64

	lost     chan struct{}
	lostOnce sync.Once
	lostErr  error
	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
}

// Lock acquires key (waiting up to wait) and starts renewing it every third
// of the lease.
func (c *Client) Lock(ctx context.Context, key string, lease, wait time.Duration) (*Locker, error) {
	start := time.Now()
	g, err := c.Acquire(ctx, key, lease, wait)
	if err != nil {
		return nil, err
	}
	l := &Locker{c: c, key: key, lease: lease, token: g.Token,
		lost: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{})}
	go l.renewLoop(start)
	return l, nil
}

// Token is the fencing token: pass it to every resource the lock guards.
func (l *Locker) Token() uint64 { return l.token }

// Key is the locked key.
func (l *Locker) Key() string { return l.key }

// Lost is closed when the lock can no longer be trusted: the cluster said
// the token no longer holds the key, or a full lease passed without a
// successful renewal.
func (l *Locker) Lost() <-chan struct{} { return l.lost }

// Err says why the lock was lost.
func (l *Locker) Err() error {
	select {
	case <-l.lost:
		return l.lostErr
	default:
		return nil
	}
}

func (l *Locker) markLost(err error) {
	l.lostOnce.Do(func() {
		l.lostErr = err
		close(l.lost)
	})
}

// renewLoop renews every lease/3. The lease is counted from the start of the
// last successful call, never from its answer, so the holder's view always
// ends before the cluster's.
func (l *Locker) renewLoop(validFrom time.Time) {
	defer close(l.stopped)
	every := max(l.lease/3, 5*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.lost:
			return
		case <-t.C:
		}
		start := time.Now()
		deadline := validFrom.Add(l.lease)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := l.c.Renew(ctx, l.key, l.token, l.lease)
		cancel()
		switch {
		case err == nil:
			validFrom = start
		case errors.Is(err, ErrNotFound):
			l.markLost(err)
			return
		case !time.Now().Before(deadline):
			l.markLost(errors.New("raftlock: lease ran out before a renewal succeeded"))
			return
		}
	}
}

// Unlock stops renewing and releases the lock.
func (l *Locker) Unlock(ctx context.Context) error {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.stopped
	select {
	case <-l.lost:
		return l.lostErr
	default:
	}
	return l.c.Release(ctx, l.key, l.token)
}

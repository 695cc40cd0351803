package member

import "fmt"

// Limits bound what one member holds for its callers, so that a flood of
// clients meets a retryable ErrOverloaded instead of a member that grows
// until the kernel kills it. Zero fields take the defaults below; a
// negative field means no limit (tests only).
type Limits struct {
	// MaxPending bounds the calls open in the core: decided, queued for
	// a proposal, proposed and not yet applied, or waiting for a lock.
	MaxPending int
	// MaxWaiters bounds the waiting acquires over all keys, and
	// MaxWaitersPerKey those queued on one key.
	MaxWaiters       int
	MaxWaitersPerKey int
	// MaxKeys bounds the keys held in the table: a Grant of one more key
	// is answered overloaded before it is proposed.
	MaxKeys int
}

// Default limits (README, Limits).
const (
	DefaultMaxPending       = 65536
	DefaultMaxWaiters       = 65536
	DefaultMaxWaitersPerKey = 4096
	DefaultMaxKeys          = 1_000_000
)

func (l *Limits) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxPending, DefaultMaxPending)
	def(&l.MaxWaiters, DefaultMaxWaiters)
	def(&l.MaxWaitersPerKey, DefaultMaxWaitersPerKey)
	def(&l.MaxKeys, DefaultMaxKeys)
}

// over says whether n has reached limit (a negative limit is none).
func over(n, limit int) bool { return limit >= 0 && n >= limit }

// SetLimits sets the manager's limits (zero fields: the defaults).
func (lm *LockManager) SetLimits(l Limits) {
	l.setDefaults()
	lm.limits = l
}

// Pending returns how many calls are open in the manager.
func (lm *LockManager) Pending() int { return len(lm.requests) }

// admitWaiter says why a waiting acquire on key may not queue, or nil.
func (lm *LockManager) admitWaiter(key string) error {
	if n := len(lm.waiters[key]); over(n, lm.limits.MaxWaitersPerKey) {
		return fmt.Errorf("%w: %d acquires already wait on this key (limit %d)", ErrOverloaded, n, lm.limits.MaxWaitersPerKey)
	}
	if over(lm.nwaiting, lm.limits.MaxWaiters) {
		return fmt.Errorf("%w: %d acquires already wait (limit %d)", ErrOverloaded, lm.nwaiting, lm.limits.MaxWaiters)
	}
	return nil
}

// admitGrant says why a Grant of a key not held may not be proposed, or
// nil: the table plus the grants in flight would exceed MaxKeys.
func (lm *LockManager) admitGrant() error {
	if n := lm.machine.Len() + len(lm.inflight); over(n, lm.limits.MaxKeys) {
		return fmt.Errorf("%w: %d keys held or being granted (limit %d)", ErrOverloaded, n, lm.limits.MaxKeys)
	}
	return nil
}

// admit says why the core refuses a new call, or nil: MaxPending calls are
// open already.
func (c *Core) admit() error {
	if n := c.lm.Pending(); over(n, c.lm.limits.MaxPending) {
		return fmt.Errorf("%w: %d calls pending on this member (limit %d)", ErrOverloaded, n, c.lm.limits.MaxPending)
	}
	return nil
}

package node

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/member"
)

// Limits bound what a member holds for its callers (see member.Limits).
type Limits = member.Limits

const (
	// callQueueLen is the loop's call queue.
	callQueueLen = 4096
	// callQueueWait is how long a call waits for room in a full queue
	// before it is answered ErrOverloaded: the loop takes up to 1024 calls
	// a turn, so a queue still full after this long is not a burst.
	callQueueWait = 100 * time.Millisecond
)

// enqueue hands cl to the loop. A full queue is waited on for at most
// callQueueWait; then the call is refused with ErrOverloaded, nothing
// having been decided, instead of parking one more goroutine per caller.
func (n *Node) enqueue(ctx context.Context, cl *call) error {
	in := callInput{cl: cl}
	select {
	case n.callc <- in:
		return nil
	default:
	}
	t := time.NewTimer(callQueueWait)
	defer t.Stop()
	select {
	case n.callc <- in:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.loopDone:
		return ErrStopped
	case <-t.C:
		return fmt.Errorf("%w: the member's call queue has been full for %v", ErrOverloaded, callQueueWait)
	}
}

// Default limits (README, Limits).
const (
	DefaultMaxPending       = member.DefaultMaxPending
	DefaultMaxWaiters       = member.DefaultMaxWaiters
	DefaultMaxWaitersPerKey = member.DefaultMaxWaitersPerKey
	DefaultMaxKeys          = member.DefaultMaxKeys
)

package member

import (
	"fmt"
	"slices"

	"github.com/raftlock/raftlock/fsm"
)

// ErrHandingOver answers a call made to a leader that is handing its
// leadership over (a graceful stop or an operator's transfer): nothing was
// proposed, so the client retries it on the next leader.
var ErrHandingOver = fmt.Errorf("%w: the leader is handing leadership over", ErrUnavailable)

// Drain prepares a leader to hand over: it takes no new calls (they get
// ErrHandingOver), and ends every call not yet proposed (queued acquires,
// reads awaiting their quorum) with ErrHandingOver, so their clients retry
// them on the next leader. Calls already proposed still get their real
// answer when they apply: the driver waits for InFlight to reach zero
// before it transfers leadership.
func (c *Core) Drain() {
	if c.draining || c.stopped {
		return
	}
	c.draining = true
	c.lm.drainUnproposed(ErrHandingOver)
	c.collect(0)
}

// Undrain takes calls again after a handover that did not happen (the
// transfer was abandoned and this member still leads).
func (c *Core) Undrain() { c.draining = false }

// Draining says whether this member is handing its leadership over.
func (c *Core) Draining() bool { return c.draining }

// InFlight returns how many calls this member has proposed and not yet
// answered.
func (c *Core) InFlight() int {
	n := 0
	for _, r := range c.lm.requests {
		if r.proposed && !r.delivered {
			n++
		}
	}
	if c.pending != nil {
		n++
	}
	return n
}

// drainUnproposed ends every request not proposed with err, in handle
// order (a replay answers in the same order).
func (lm *LockManager) drainUnproposed(err error) {
	var handles []uint64
	for h, r := range lm.requests {
		if !r.proposed {
			handles = append(handles, h)
		}
	}
	slices.Sort(handles)
	for _, h := range handles {
		req := lm.requests[h]
		lm.removeWaiter(req)
		lm.deliver(req, fsm.Result{}, err)
	}
}

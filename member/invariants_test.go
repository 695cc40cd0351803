package member

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// Each invariant fails when the bookkeeping it watches is broken: a
// waiter counted twice, a Grant in flight nobody waits for, a lease whose
// token is not the table's, a lease queue out of order.
func TestInvariantsCatchBrokenBookkeeping(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(lm *LockManager)
		want    string
	}{
		{"waiter count", func(lm *LockManager) { lm.nwaiting++ }, "waiters counted"},
		{"in flight but not pending", func(lm *LockManager) { lm.inflight["x"] = fsm.RequestID{Node: 1, Seq: 99} }, "not pending"},
		{"lease token", func(lm *LockManager) { lm.leases.all[lm.leases.q[0]].token++ }, "has token"},
		{"lease queue order", func(lm *LockManager) {
			t := &lm.leases
			t.q[0], t.q[1] = t.q[1], t.q[0]
			t.all[t.q[0]].pos, t.all[t.q[1]].pos = 0, 1
		}, "out of order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := leaderHoldingK(t)
			holdKeys(h, "j")
			queue(h, "k", 1)
			if err := h.lm.invariantViolation(); err != nil {
				t.Fatalf("before: %v", err)
			}
			tc.breakIt(h.lm)
			err := h.lm.invariantViolation()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

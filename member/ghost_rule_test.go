package member

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// Rule 7's other half: a ghost is released only while no linearizable read
// can have shown it held. A caller told "outcome unknown" may read the
// lock, recognise its owner and keep it; releasing it then would end a
// hold its holder knows of, before its lease.
func TestGhostIsNeverReleasedAfterAReadShowedIt(t *testing.T) {
	// The Grant of a caller that left applies: its ghost Release is
	// proposed at once.
	ghostReleaseInFlight := func(t *testing.T) *lmHarness {
		h := newLeader(t)
		h.expect("acquire", h.submit(req(tryAcquire, 1)), `propose Grant{"k", 1000ms}@2`)
		h.expect("the caller leaves", h.do(func() { h.lm.Abandon(1, "k", 0) }), "")
		h.expect("the Grant applies", h.commit(), `propose Release{"k"}@2; ghost releases 1`)
		return h
	}
	t.Run("get_waits_for_the_ghost_release", func(t *testing.T) {
		h := ghostReleaseInFlight(t)
		h.expect("get", h.submit(req(linGet, 2)), "read h2")
		h.expect("confirmed: it waits", h.confirm(2, nil), "")
		h.expect("the ghost release applies", h.commit(), "h2: free")
		h.settled()
	})
	t.Run("list_waits_for_the_ghost_release", func(t *testing.T) {
		h := ghostReleaseInFlight(t)
		h.expect("list", h.submit(Request{Handle: 2, Op: OpList, Limit: 10}), "read h2")
		h.expect("confirmed: it waits", h.confirm(2, nil), "")
		h.expect("the ghost release applies", h.commit(), "h2: list [] more=false")
		h.settled()
	})
	t.Run("stale_get_does_not_wait", func(t *testing.T) {
		h := ghostReleaseInFlight(t)
		h.expect("stale get", h.submit(req(staleGet, 2)), "h2: held by 1, 1000ms left")
	})
	t.Run("ghost_release_dropped_answers_the_read_from_the_table", func(t *testing.T) {
		h := ghostReleaseInFlight(t)
		h.submit(req(linGet, 2))
		h.confirm(2, nil)
		release := h.take()
		h.expect("dropped", h.do(func() { h.lm.Drop(h.now, []fsm.Envelope{release}) }), "h2: held by 1, 1000ms left")
	})
	// The grant reached the driver after its caller left, but a read
	// showed it held first.
	t.Run("grant_a_read_showed_is_no_ghost", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(tryAcquire, 1))
		h.expect("granted", h.commit(), "h1: token 1")
		h.submit(req(linGet, 2))
		h.expect("a get shows it", h.confirm(2, nil), "h2: held by 1, 1000ms left")
		h.expect("the caller turns out gone", h.do(func() { h.lm.Abandon(1, "k", 1) }), "")
		h.expect("k", h.holder("k"), "held by 1")
	})
	t.Run("a_renewal_keeps_it_shown", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(tryAcquire, 1))
		h.commit()
		h.submit(req(linGet, 2))
		h.confirm(2, nil)
		h.expect("renew", h.submit(req(renewBy1, 3)), `propose Renew{"k", 1, 2000ms}@2`)
		h.expect("renewed", h.commit(), "h3: ok")
		h.expect("the caller turns out gone", h.do(func() { h.lm.Abandon(1, "k", 1) }), "")
	})
	// Granted in an earlier leadership of this member's: the leaders
	// between may have shown it.
	t.Run("grant_of_an_earlier_leadership_is_no_ghost", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(tryAcquire, 1))
		h.expect("granted", h.commit(), "h1: token 1")
		h.follow(3, 3)
		h.lead(4)
		h.expect("the caller turns out gone", h.do(func() { h.lm.Abandon(1, "k", 1) }), "")
		h.expect("k", h.holder("k"), "held by 1")
	})
}

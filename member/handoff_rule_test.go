package member

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// A holder's call that meets a handoff in flight (its lease ran out, and
// the Expire and the first waiter's Grant share an entry not yet applied)
// is decided once that entry applies. Decided before, it answered
// "not the holder" while the applied table, and so a get, still showed
// the holder: the simulator's seed 550 (a release answered not-found,
// then a get answered "held by" the same token).
func TestHolderCallMeetingAHandoffWaitsForIt(t *testing.T) {
	handoffInFlight := func(t *testing.T) *lmHarness {
		h := leaderHoldingK(t)
		h.expect("a waiter", h.submit(req(waitAcquire, 101)), "waiting 1")
		h.expect("the lease runs out", h.tick(1000*ms),
			`propose Expire{"k", 1}@2 + Grant{"k", 1000ms}@2; waiting 0`)
		return h
	}
	for _, tc := range []struct {
		name   string
		call   Request
		submit string // when the call arrives
		then   string // once the handoff applied
		end    string // after the call's read confirmed
	}{
		{"release", releaseBy1, "", "h101: token 2; read h1", "h1: NotFound"},
		{"renew", renewBy1, "", "h101: token 2; read h1", "h1: NotFound"},
		// A forced release reads first (rule 12), then meets the handoff:
		// the hold it read is gone once it applied, and the new grant is
		// not its to end.
		{"forced_release", Request{Handle: 1, Op: OpRelease, Key: "k", Force: true}, "read h1",
			"h101: token 2; h1: NotFound", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := handoffInFlight(t)
			h.expect("the call arrives", h.submit(tc.call), tc.submit)
			if tc.call.Force {
				h.expect("its read confirmed: it waits for the handoff", h.confirm(1, nil), "")
			}
			h.expect("a get still shows the holder", h.submit(req(linGet, 2)), "read h2")
			h.expect("confirmed", h.confirm(2, nil), "h2: held by 1, 0ms left")
			h.expect("the Expire applies", h.commit(), "")
			h.expect("the Grant applies", h.commit(), tc.then)
			if !tc.call.Force {
				h.expect("confirmed", h.confirm(1, nil), tc.end)
			}
			h.settled()
		})
	}
	// The handoff's entry refused by raft: the call is decided on the
	// table as it stands, where its token still holds the key.
	t.Run("handoff_dropped", func(t *testing.T) {
		h := handoffInFlight(t)
		h.expect("the release waits", h.submit(releaseBy1), "")
		expire, grant := h.take(), h.take()
		h.expect("dropped", h.do(func() { h.lm.Drop(h.now, []fsm.Envelope{expire, grant}) }),
			`h101: Unavailable; propose Release{"k"}@2`)
		h.expect("the release applies", h.commit(), "h1: ok")
		h.settled()
	})
	// A forced release's token is the one it read from the table, even
	// when the caller named another.
	t.Run("forced_release_ignores_a_token_given", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.expect("force", h.submit(Request{Handle: 1, Op: OpRelease, Key: "k", Force: true, Token: 9}), "read h1")
		h.expect("confirmed", h.confirm(1, nil), `propose Release{"k"}@2`)
		h.expect("applies", h.commit(), "h1: released 1")
		h.settled()
	})
	// A call abandoned while it waits leaves the waiting list at once.
	t.Run("abandoned_while_waiting", func(t *testing.T) {
		h := handoffInFlight(t)
		h.submit(releaseBy1)
		h.expect("abandon", h.do(func() { h.lm.Abandon(1, "k", 0) }), "h1: Unavailable")
		if len(h.lm.parked) != 0 {
			t.Fatalf("parked after the abandon: %v", h.lm.parked)
		}
		h.expect("the handoff applies", h.commitAll(), "h101: token 2")
		h.settled()
	})
	t.Run("planted_bug_answers_before_the_handoff", func(t *testing.T) {
		h := newLM(t, BugHolderCallDuringHandoff)
		h.lead(2)
		h.submit(req(tryAcquire, 100))
		h.commit()
		h.submit(req(waitAcquire, 101))
		h.tick(1000 * ms)
		h.expect("the release reads at once", h.submit(releaseBy1), "read h1")
		h.expect("and is answered before the Expire applied", h.confirm(1, nil), "h1: NotFound")
	})
}

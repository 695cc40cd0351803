package checker

import (
	"fmt"
	"math"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

// holderKey names one token's hold on one key. Releases and renewals are
// matched on both: a release of key b with token 1 says nothing about key a.
type holderKey struct {
	key   string
	token uint64
}

// holderOps are the operations a holder made with its token.
type holderOps struct {
	releases      []*Op // ok or info: may have freed the key from their call on
	renewals      []*Op // ok: applied while the token held the key
	maybeRenewals []*Op // info: may have applied
	notFound      []*Op // release or renew answered not-found: the token no longer held the key
}

func gatherHolderOps(ops []*Op) map[holderKey]*holderOps {
	hs := map[holderKey]*holderOps{}
	for _, o := range ops {
		if o.F != history.OpRelease && o.F != history.OpRenew {
			continue
		}
		k := holderKey{o.Key, o.Token()}
		h, ok := hs[k]
		if !ok {
			h = &holderOps{}
			hs[k] = h
		}
		switch {
		case o.Type == history.Fail:
			if o.Error() == "not-found" {
				h.notFound = append(h.notFound, o)
			}
		case o.F == history.OpRelease:
			h.releases = append(h.releases, o)
		case o.Type == history.OK:
			h.renewals = append(h.renewals, o)
		default:
			h.maybeRenewals = append(h.maybeRenewals, o)
		}
	}
	return hs
}

// forcedReleasesOfUnknownToken are the forced releases, per key, whose
// outcome is unknown: each may have ended whichever hold it met. (An ok
// one names its token and counts as that holder's release.)
func forcedReleasesOfUnknownToken(ops []*Op) map[string][]*Op {
	out := map[string][]*Op{}
	for _, o := range ops {
		if o.Forced() && o.Type == history.Info {
			out[o.Key] = append(out[o.Key], o)
		}
	}
	return out
}

// checkLeaseTiming: a grant the client heard (ok) holds its key for its
// lease, counted from the invocation of the acquire or of the renewal that
// applied last, unless a release of that (key, token) may have freed it.
// The hold is seen to end by the earliest of: any operation that saw a
// higher token on the key (a grant of it, a get, a release or renewal with
// it), a get that found the key free, or a release or renewal of the token
// answered not-found, the last two invoked after the grant had applied.
// That end must not come before some member's clock can have counted the
// lease out: exactly the lease outside clock faults, and inside them the
// most the fastest injected clock and its forward jumps allow.
//
// A grant whose client gave up may have been released by the leader as a
// ghost (rule 7) the moment it applied, but not once a read showed it
// held: its client, told "outcome unknown", may have read it and kept it.
// So ok grants are held to this, and grants the committed log resolved
// whose token a get (or a list) showed holding the key.
func checkLeaseTiming(ops []*Op, ev map[string]*keyEvidence, clocks *clockModel, opts Options) Result {
	res := Result{Name: "lease-timing", Decides: !opts.ClockOverride, Status: StatusOK}
	switch {
	case opts.ClockOverride:
		res.Note = "clock faults declared by --clock-faults: timing is reported, not decisive; fencing keeps the resource safe"
	case clocks.faulted():
		res.Note = "clock faults in the history: grants inside their windows are judged against the fastest injected clock"
	}
	holders := gatherHolderOps(ops)
	forcedUnknown := forcedReleasesOfUnknownToken(ops)
	tol := float64(opts.LeaseTolerance)
	for _, g := range ops {
		if g.F != history.OpAcquire || g.Token() == 0 {
			continue
		}
		t := g.Token()
		kev := ev[g.Key]
		if g.Type != history.OK && !kev.readShowed(t) {
			continue
		}
		applied := g.Return()
		if s, ok := kev.heldBy(t); ok {
			applied = min(applied, s.at)
		}
		// The earliest sign that t no longer held the key.
		endAt, endOp := int64(maxTime), (*Op)(nil)
		if s, ok := kev.heldBy(t + 1); ok {
			endAt, endOp = s.at, s.op
		}
		if f, ok := kev.freeAfter(applied); ok && f.Return() < endAt {
			endAt, endOp = f.Return(), f
		}
		h := holders[holderKey{g.Key, t}]
		if h == nil {
			h = &holderOps{}
		}
		for _, nf := range h.notFound {
			if nf.Call() >= applied && nf.Return() < endAt {
				endAt, endOp = nf.Return(), nf
			}
		}
		if endOp == nil {
			continue
		}
		released := false
		for _, r := range h.releases {
			released = released || r.Call() <= endAt
		}
		for _, r := range forcedUnknown[g.Key] {
			released = released || r.Call() <= endAt
		}
		if released {
			continue
		}
		if vi, ok := leaseOutlived(g, h, endAt, endOp, clocks, tol); ok {
			res.Violations = append(res.Violations, vi)
		}
	}
	if len(res.Violations) > 0 {
		res.Status = StatusViolation
	}
	return res
}

// leaseOutlived decides whether the hold of g, seen over by endAt, could have
// run out by then, and if not describes the violation.
func leaseOutlived(g *Op, h *holderOps, endAt int64, endOp *Op, clocks *clockModel, tol float64) (Violation, bool) {
	t := g.Token()
	// A renewal that succeeded applied while t held the key: after endAt it
	// cannot have.
	for _, r := range h.renewals {
		if r.Call() > endAt {
			return Violation{Key: g.Key,
				Message: fmt.Sprintf("token %d on %q was renewed (renewal invoked at %s succeeded) after it had lost the key; seen by %s",
					t, g.Key, ms(r.Call()), describe(endOp)),
				Events: concatEvents(g, r, endOp)}, true
		}
	}
	// The lease runs from the renewal that applied last, or from the grant
	// if none did. Any renewal no other successful one surely followed may
	// be that last one, and so may a renewal whose outcome is unknown.
	var from []*Op
	if len(h.renewals) == 0 {
		from = append(from, g)
	}
	for _, r := range h.renewals {
		last := true
		for _, r2 := range h.renewals {
			last = last && r2.Call() <= r.Return()
		}
		if last {
			from = append(from, r)
		}
	}
	for _, r := range h.maybeRenewals {
		if r.Call() < endAt {
			from = append(from, r)
		}
	}
	var closest *Op
	short, faulty := math.Inf(1), false
	for _, c := range from {
		need := float64(leaseOf(c))*float64(time.Millisecond) - tol
		adv, f := clocks.maxAdvance(c.Call(), endAt)
		if adv >= need {
			return Violation{}, false
		}
		if need-adv < short {
			closest, short, faulty = c, need-adv, f
		}
	}
	basis := history.OpAcquire
	if closest != g {
		basis = "renewal"
	}
	clock := ""
	if faulty {
		clock = ", even at the fastest clock the injected faults allow"
	}
	return Violation{Key: g.Key,
		Message: fmt.Sprintf("token %d lost %q %.1fms before its %dms lease (from its %s invoked at %s) could have run out%s; seen by %s",
			t, g.Key, short/1e6, leaseOf(closest), basis, ms(closest.Call()), clock, describe(endOp)),
		Events: concatEvents(g, closest, endOp)}, true
}

// concatEvents lists the events of distinct operations, in the order given.
func concatEvents(os ...*Op) []history.Event {
	var out []history.Event
	seen := map[*Op]bool{}
	for _, o := range os {
		if o == nil || seen[o] {
			continue
		}
		seen[o] = true
		out = append(out, o.events()...)
	}
	return out
}

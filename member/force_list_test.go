package member

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

var forceRelease = Request{Handle: 1, Op: OpRelease, Key: "k", Force: true}

// TestForcedReleaseInEveryLockState: a forced release (rule 12) is decided
// only on a table confirmed current, releases the holder's token whatever
// token the caller gave, and names it in its answer; on a free key, or one
// whose only grant is still in flight, it answers NotFound and proposes
// nothing, so it can never end a grant that applies after it.
func TestForcedReleaseInEveryLockState(t *testing.T) {
	rows := map[string][]string{ // submit, confirm, commit all
		"follower_of_3":                  {"h1: NotLeader(3)"},
		"follower_without_leader":        {"h1: NotLeader(0)"},
		"leader_before_its_term_barrier": {"h1: Unavailable"},
		"leader_key_free":                {"read h1", "h1: NotFound"},
		"leader_key_held_by_1":           {"read h1", `propose Release{"k"}@2`, "h1: released 1"},
		"leader_grant_in_flight":         {"read h1", "h1: NotFound", "h100: token 1"},
		"leader_key_held_with_waiters": {"read h1", `propose Release{"k"}@2 + Grant{"k", 1000ms}@2; waiting 0`,
			`h1: released 1 | h101: token 2`},
	}
	for _, st := range lockStates {
		want, ok := rows[st.name]
		if !ok {
			t.Fatalf("no row for state %s", st.name)
		}
		t.Run(st.name, func(t *testing.T) {
			h := newLM(t, "")
			st.setup(h)
			h.now = 100 * ms
			h.expect("submit", h.submit(req(forceRelease, 1)), want[0])
			if len(want) > 1 {
				h.expect("confirmed", h.confirm(1, nil), want[1])
			}
			if len(want) > 2 {
				h.expect("committed", h.commitAll(), want[2])
			}
		})
	}
}

// A forced release decided on a confirmed table is a token-checked
// release: when the holder's own Release is in the log with the next
// waiter's Grant behind it, the forced release waits for that handoff to
// apply (until then a get still shows the holder) and then answers
// NotFound, the hold it read gone; with the handoff off, it is proposed
// after the holder's Release and applies to a free key. It never frees
// the new grant.
func TestForcedReleaseNeverEndsALaterGrant(t *testing.T) {
	for _, handoff := range []bool{true, false} {
		h := newLM(t, "")
		h.lm.SetHandoff(handoff)
		h.lead(2)
		h.expect("acquire", h.submit(req(tryAcquire, 100)), `propose Grant{"k", 1000ms}@2`)
		h.expect("granted", h.commit(), "h100: token 1")
		h.expect("waiter", h.submit(req(waitAcquire, 101)), "waiting 1")
		h.submit(req(releaseBy1, 102))
		h.expect("force", h.submit(req(forceRelease, 1)), "read h1")
		if handoff {
			h.expect("force confirmed: it waits for the handoff", h.confirm(1, nil), "")
			h.expect("commit all", h.commitAll(), `h102: ok | h101: token 2; h1: NotFound`)
		} else {
			h.expect("force confirmed", h.confirm(1, nil), `propose Release{"k"}@2`)
			h.expect("commit all", h.commitAll(), `h102: ok; propose Grant{"k", 1000ms}@2; waiting 0 | h1: NotFound | h101: token 2`)
		}
		if l, held := h.lm.Machine().Get("k"); !held || l.Token != 2 {
			t.Fatalf("handoff %v: after the forced release: %+v held %v, want token 2 held", handoff, l, held)
		}
		h.settled()
	}
}

// The planted twin: with force-release-unchecked the forced Release is
// proposed at once on a key whose grant is still in flight, applies after
// it, and frees the lock its client was just told it holds.
func TestForceReleaseUncheckedFreesALaterGrant(t *testing.T) {
	run := func(bug string) string {
		h := newLM(t, bug)
		h.lead(2)
		out := []string{h.submit(req(tryAcquire, 100)), h.submit(req(forceRelease, 1))}
		if strings.HasPrefix(out[1], "read ") {
			out = append(out, h.confirm(1, nil))
		}
		out = append(out, h.commitAll())
		_, held := h.lm.Machine().Get("k")
		return strings.Join(out, " | ") + fmt.Sprintf(" | held %v", held)
	}
	check(t, "without the bug", run(""), `propose Grant{"k", 1000ms}@2 | read h1 | h1: NotFound | h100: token 1 | held true`)
	check(t, "with "+BugForceReleaseUnchecked, run(BugForceReleaseUnchecked),
		`propose Grant{"k", 1000ms}@2 | propose Release{"k"}@2 | h100: token 1 | h1: ok | held false`)
}

func TestOwnerIsKeptAndShown(t *testing.T) {
	h := newLeader(t)
	acq := req(tryAcquire, 100)
	acq.Owner = "web-1:4242"
	h.expect("acquire", h.submit(acq), `propose Grant{"k", 1000ms, owner "web-1:4242"}@2`)
	h.expect("granted", h.commit(), "h100: token 1")
	h.now = 100 * ms
	h.expect("get", h.submit(req(linGet, 1)), "read h1")
	h.expect("get confirmed", h.confirm(1, nil), "h1: held by 1 (web-1:4242), 900ms left")
	long := req(tryAcquire, 2)
	long.Key, long.Owner = "other", strings.Repeat("o", fsm.MaxOwnerLen+1)
	h.expect("long owner", h.submit(long), "h2: InvalidArgument")
}

// List pages are read like a get (a quorum read first, rule 9), in key
// order under a prefix, with each lock's owner and remaining lease.
func TestListPagesLinearizably(t *testing.T) {
	h := newLeader(t)
	for i, key := range []string{"jobs/b", "jobs/a", "web/x", "jobs/c"} {
		r := Request{Handle: uint64(100 + i), Op: OpAcquire, Key: key, Lease: time.Second, Owner: fmt.Sprintf("o%d", i)}
		h.submit(r)
		h.commit()
	}
	h.now = 200 * ms
	page := Request{Handle: 1, Op: OpList, Prefix: "jobs/", Limit: 2}
	h.expect("list", h.submit(page), "read h1")
	h.expect("list confirmed", h.confirm(1, nil), "h1: list [jobs/a=2(o1,800ms) jobs/b=1(o0,800ms)] more=true")
	next := Request{Handle: 2, Op: OpList, Prefix: "jobs/", After: "jobs/b", Limit: 2, Stale: true}
	h.expect("next page (stale)", h.submit(next), "h2: list [jobs/c=4(o3,800ms)] more=false")
	h.expect("bad limit", h.submit(Request{Handle: 3, Op: OpList, Limit: MaxList + 1}), "h3: InvalidArgument")
	h.follow(3, 3)
	h.expect("follower redirects", h.submit(Request{Handle: 4, Op: OpList}), "h4: NotLeader(3)")
}

// A page stops before ListBudget bytes, so it always fits one answer frame.
func TestListPageFitsItsBudget(t *testing.T) {
	h := newLeader(t)
	owner := strings.Repeat("o", fsm.MaxOwnerLen)
	for i := range 300 {
		key := fmt.Sprintf("%0250d", i)
		h.submit(Request{Handle: uint64(100 + i), Op: OpAcquire, Key: key, Lease: time.Second, Owner: owner})
		h.commit()
	}
	h.lm.Submit(h.now, Request{Handle: 1, Op: OpList, Limit: MaxList, Stale: true})
	fx := h.lm.TakeEffects()
	if len(fx.Answers) != 1 {
		t.Fatalf("%d answers", len(fx.Answers))
	}
	l := fx.Answers[0].List
	size := 0
	for _, e := range l.Locks {
		size += len(e.Key) + len(e.Owner) + 32
	}
	if !l.More || size > ListBudget || len(l.Locks) == 0 {
		t.Fatalf("page of %d locks, %d bytes, more %v: want more, at most %d bytes", len(l.Locks), size, l.More, ListBudget)
	}
}

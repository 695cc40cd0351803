package member

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// The lock manager is pure: these tests drive it through its public API
// with a harness that plays the rest of the member. The harness "commits"
// the manager's proposals by applying them in order, one log entry each,
// and describes every effect of a call as one line, so that a table row
// reads as the rule it checks:
//
//	h1: Held                          the answer to handle 1
//	h1: token 2                       a granted acquire
//	h1: held by 1, 900ms left         a get
//	propose Grant{"k", 1000ms}@2      a proposal and the term it was decided in
//	read h1                           a quorum read to confirm before answering
//	ghost releases 1                  releases proposed for grants nobody uses
//	waiting 2                         the number of queued acquires changed to 2

const ms = time.Millisecond

type lmHarness struct {
	t     testing.TB
	lm    *LockManager
	now   time.Duration
	index uint64     // last applied log index
	log   []Proposal // proposed, not yet committed, in order
	ops   map[uint64]Op
	done  map[uint64]Answer // handles answered so far
	fseq  uint64            // request ids of commands from other members
	// request ids member 1 proposed, all above seqStart
	ids      map[fsm.RequestID]bool
	seqStart uint64
	// invariants: every step is followed by the manager's invariant
	// checks (off with a planted bug, which may break them by design).
	invariants bool
}

func newLM(t testing.TB, bug string) *lmHarness {
	t.Helper()
	return &lmHarness{t: t, lm: NewLockManager(1, bug, 0), ops: map[uint64]Op{}, done: map[uint64]Answer{},
		ids: map[fsm.RequestID]bool{}, invariants: bug == ""}
}

// lead makes member 1 the leader of term and applies the first entry of
// that term, which lifts the term barrier.
func (h *lmHarness) lead(term uint64) {
	h.t.Helper()
	h.expect("become leader", h.do(func() { h.lm.Become(true, term, 1) }), "")
	h.barrier(term)
}

// barrier applies an empty entry of term (raft's leader no-op).
func (h *lmHarness) barrier(term uint64) string {
	return h.do(func() {
		h.index++
		h.lm.AppliedEntry(h.index, term)
	})
}

func (h *lmHarness) follow(term, leader uint64) {
	h.t.Helper()
	h.expect("become follower", h.do(func() { h.lm.Become(false, term, leader) }), "")
}

// foreign applies a command another member proposed in term.
func (h *lmHarness) foreign(term uint64, cmd fsm.Command) fsm.Result {
	h.fseq++
	h.index++
	var res fsm.Result
	h.expect("apply "+cmd.String(), h.do(func() {
		res = h.lm.Apply(h.now, fsm.Envelope{ID: fsm.RequestID{Node: 3, Seq: h.fseq}, Cmd: cmd}, term)
		h.lm.AppliedEntry(h.index, term)
	}), "")
	return res
}

func (h *lmHarness) submit(r Request) string {
	h.ops[r.Handle] = r.Op
	return h.do(func() { h.lm.Submit(h.now, r) })
}

func (h *lmHarness) confirm(handle uint64, err error) string {
	return h.do(func() { h.lm.Confirmed(h.now, handle, err) })
}

func (h *lmHarness) tick(at time.Duration) string {
	h.now = at
	return h.do(func() { h.lm.Tick(at) })
}

// commit applies the oldest uncommitted proposal as the next log entry, in
// the term it was proposed in.
func (h *lmHarness) commit() string {
	h.t.Helper()
	if len(h.log) == 0 {
		h.t.Fatal("commit: nothing proposed")
	}
	p := h.log[0]
	h.log = h.log[1:]
	return h.do(func() {
		h.index++
		h.lm.Apply(h.now, p.Env, p.Term)
		h.lm.AppliedEntry(h.index, p.Term)
	})
}

// commitAll commits every proposal, including those the commits trigger.
func (h *lmHarness) commitAll() string {
	var out []string
	for len(h.log) > 0 {
		if s := h.commit(); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, " | ")
}

// take removes the oldest uncommitted proposal without committing it (raft
// refused it, or it is about to be dropped).
func (h *lmHarness) take() fsm.Envelope {
	h.t.Helper()
	if len(h.log) == 0 {
		h.t.Fatal("take: nothing proposed")
	}
	p := h.log[0]
	h.log = h.log[1:]
	return p.Env
}

// do runs f and describes its effects. Every answer must be the first for
// its handle, and every proposal carries a fresh request id of member 1.
func (h *lmHarness) do(f func()) string {
	h.t.Helper()
	before := h.lm.Waiting()
	f()
	if err := h.lm.invariantViolation(); err != nil && h.invariants {
		h.t.Fatal(err)
	}
	fx := h.lm.TakeEffects()
	var out []string
	for _, a := range fx.Answers {
		if prev, ok := h.done[a.Handle]; ok {
			h.t.Errorf("handle %d answered twice: %s, then %s", a.Handle, h.answerText(prev), h.answerText(a))
		}
		h.done[a.Handle] = a
		out = append(out, fmt.Sprintf("h%d: %s", a.Handle, h.answerText(a)))
	}
	bound := false // the previous proposal shares its entry with this one
	for _, p := range fx.Proposals {
		if p.Env.ID.Node != 1 || p.Env.ID.Seq <= h.seqStart || h.ids[p.Env.ID] {
			h.t.Errorf("proposal %v has request id %+v: not a fresh id of member 1 after seq %d", p.Env.Cmd, p.Env.ID, h.seqStart)
		}
		h.ids[p.Env.ID] = true
		s := fmt.Sprintf("%v@%d", p.Env.Cmd, p.Term)
		if p.Env.Tag != 0 {
			s += fmt.Sprintf(" tag=%d", p.Env.Tag)
		}
		if bound {
			out[len(out)-1] += " + " + s
		} else {
			out = append(out, "propose "+s)
		}
		bound = p.WithNext
	}
	if bound {
		h.t.Errorf("the last proposal is bound to a next one that does not exist")
	}
	h.log = append(h.log, fx.Proposals...)
	for _, r := range fx.Reads {
		out = append(out, fmt.Sprintf("read h%d", r))
	}
	if fx.GhostReleases != 0 {
		out = append(out, fmt.Sprintf("ghost releases %d", fx.GhostReleases))
	}
	if after := h.lm.Waiting(); after != before {
		out = append(out, fmt.Sprintf("waiting %d", after))
	}
	return strings.Join(out, "; ")
}

// holder is what the applied table holds for key: "free" or "held by N".
func (h *lmHarness) holder(key string) string {
	l, ok := h.lm.Machine().Get(key)
	if !ok {
		return "free"
	}
	return fmt.Sprintf("held by %d", l.Token)
}

func (h *lmHarness) answerText(a Answer) string {
	if a.Err != nil {
		return errName(a.Err)
	}
	switch h.ops[a.Handle] {
	case OpAcquire:
		return fmt.Sprintf("token %d", a.Token)
	case OpGet:
		if !a.Lock.Held {
			return "free"
		}
		if a.Lock.Owner != "" {
			return fmt.Sprintf("held by %d (%s), %dms left", a.Lock.Token, a.Lock.Owner, a.Lock.RemainingMS)
		}
		return fmt.Sprintf("held by %d, %dms left", a.Lock.Token, a.Lock.RemainingMS)
	case OpList:
		var locks []string
		for _, l := range a.List.Locks {
			locks = append(locks, fmt.Sprintf("%s=%d(%s,%dms)", l.Key, l.Token, l.Owner, l.RemainingMS))
		}
		return fmt.Sprintf("list [%s] more=%v", strings.Join(locks, " "), a.List.More)
	case OpBackup:
		return fmt.Sprintf("backup at %d: %d locks", a.Backup.Index, a.Backup.Table.Len())
	}
	if a.Token != 0 {
		return fmt.Sprintf("released %d", a.Token)
	}
	return "ok"
}

// sentinelNames are the names errName gives the sentinel errors.
var sentinelNames = []struct {
	err  error
	name string
}{
	{ErrHeld, "Held"},
	{ErrNotFound, "NotFound"},
	{ErrUnavailable, "Unavailable"},
	{ErrOutcomeUnknown, "OutcomeUnknown"},
	{ErrGrantRejected, "GrantRejected"},
	{ErrStopped, "Stopped"},
	{ErrOverloaded, "Overloaded"},
}

func errName(err error) string {
	var nl *NotLeaderError
	var ia *InvalidArgumentError
	switch {
	case errors.As(err, &nl):
		return fmt.Sprintf("NotLeader(%d)", nl.LeaderID)
	case errors.As(err, &ia):
		return "InvalidArgument"
	}
	for _, s := range sentinelNames {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "error(" + err.Error() + ")"
}

func (h *lmHarness) expect(what, got, want string) {
	h.t.Helper()
	check(h.t, what, got, want)
}

func check(t testing.TB, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n got: %s\nwant: %s", what, orNothing(got), orNothing(want))
	}
}

func orNothing(s string) string {
	if s == "" {
		return "(nothing)"
	}
	return s
}

// settled checks that nothing is left behind: no open request, proposal
// record or in-flight mark once every call was answered and every proposal
// committed.
func (h *lmHarness) settled() {
	h.t.Helper()
	lm := h.lm
	checkTimers(h.t, lm)
	if len(h.log) != 0 || len(lm.requests) != 0 || len(lm.pending) != 0 || len(lm.inflight) != 0 ||
		len(lm.renewing) != 0 || len(lm.waiters) != 0 || len(lm.waitQ) != 0 || len(lm.parked) != 0 || len(lm.ghostReleasing) != 0 {
		h.t.Fatalf("left behind: %d uncommitted, requests %v, pending %v, inflight %v, renewing %v, waiters %v, parked %v, ghost releases %v",
			len(h.log), lm.requests, lm.pending, lm.inflight, lm.renewing, lm.waiters, lm.parked, lm.ghostReleasing)
	}
}

// Requests. Handle 1 is the request under test; setups use 100 and up.
var (
	tryAcquire   = Request{Handle: 1, Op: OpAcquire, Key: "k", Lease: time.Second}
	waitAcquire  = Request{Handle: 1, Op: OpAcquire, Key: "k", Lease: time.Second, Wait: 5 * time.Second}
	releaseBy1   = Request{Handle: 1, Op: OpRelease, Key: "k", Token: 1}
	releaseBy7   = Request{Handle: 1, Op: OpRelease, Key: "k", Token: 7}
	renewBy1     = Request{Handle: 1, Op: OpRenew, Key: "k", Token: 1, Lease: 2 * time.Second}
	renewBy7     = Request{Handle: 1, Op: OpRenew, Key: "k", Token: 7, Lease: 2 * time.Second}
	linGet       = Request{Handle: 1, Op: OpGet, Key: "k"}
	staleGet     = Request{Handle: 1, Op: OpGet, Key: "k", Stale: true}
	backup       = Request{Handle: 1, Op: OpBackup}
	badKey       = Request{Handle: 1, Op: OpAcquire, Key: "", Lease: time.Second}
	badLease     = Request{Handle: 1, Op: OpAcquire, Key: "k", Lease: 5 * ms}
	grantK1000ms = fsm.Command{Op: fsm.OpGrant, Key: "k", LeaseMS: 1000}
)

// newLeader is member 1 leading term 2, past its barrier, with nothing
// held.
func newLeader(t *testing.T) *lmHarness {
	t.Helper()
	h := newLM(t, "")
	h.lead(2)
	return h
}

// leaderHoldingK is member 1 leading term 2, with k held by token 1
// (a try-acquire, handle 100, granted and applied).
func leaderHoldingK(t *testing.T) *lmHarness {
	t.Helper()
	h := newLeader(t)
	h.submit(req(tryAcquire, 100))
	h.commit()
	return h
}

func req(r Request, handle uint64) Request {
	r.Handle = handle
	return r
}

// lockStates build every state a key can be in, as seen by member 1, at
// local time 0; every lease in them is 1000ms long, granted at time 0.
var lockStates = []struct {
	name  string
	setup func(h *lmHarness)
}{
	{"follower_of_3", func(h *lmHarness) {
		h.follow(2, 3)
		h.foreign(2, grantK1000ms) // k held by token 1
	}},
	{"follower_without_leader", func(h *lmHarness) {
		h.follow(2, 0)
		h.foreign(2, grantK1000ms)
	}},
	{"leader_before_its_term_barrier", func(h *lmHarness) {
		h.follow(2, 3)
		h.foreign(2, grantK1000ms)
		h.expect("become leader", h.do(func() { h.lm.Become(true, 3, 1) }), "")
	}},
	{"leader_key_free", func(h *lmHarness) {
		h.lead(2)
	}},
	{"leader_key_held_by_1", func(h *lmHarness) {
		h.lead(2)
		h.expect("setup acquire", h.submit(req(tryAcquire, 100)), `propose Grant{"k", 1000ms}@2`)
		h.expect("setup commit", h.commit(), "h100: token 1")
	}},
	{"leader_grant_in_flight", func(h *lmHarness) {
		h.lead(2)
		h.expect("setup acquire", h.submit(req(tryAcquire, 100)), `propose Grant{"k", 1000ms}@2`)
	}},
	{"leader_key_held_with_waiters", func(h *lmHarness) {
		h.lead(2)
		h.expect("setup acquire", h.submit(req(tryAcquire, 100)), `propose Grant{"k", 1000ms}@2`)
		h.expect("setup commit", h.commit(), "h100: token 1")
		h.expect("setup waiter", h.submit(req(waitAcquire, 101)), "waiting 1")
	}},
}

// TestEveryRequestInEveryLockState submits each kind of request in each
// lock state at time 100ms and checks its exact effect; a request that
// needs a quorum read is then confirmed (then: ...), and one that was
// proposed is committed (then: ...).
func TestEveryRequestInEveryLockState(t *testing.T) {
	type row struct {
		req  Request
		name string
		want string
		then string // after Confirmed(nil) of a read, or committing a proposal
	}
	const (
		grantK   = `propose Grant{"k", 1000ms}@2`
		releaseK = `propose Release{"k"}@2`
		renewK   = `propose Renew{"k", 1, 2000ms}@2`
		heldBy1  = "h1: held by 1, 900ms left"
	)
	// Rows that read alike in several states.
	rejected := []row{
		{badKey, "invalid key is rejected", "h1: InvalidArgument", ""},
		{badLease, "invalid lease is rejected", "h1: InvalidArgument", ""},
	}
	nonHolder := []row{
		{releaseBy7, "release by non-holder reads then answers NotFound", "read h1", "h1: NotFound"},
		{renewBy7, "renew by non-holder reads then answers NotFound", "read h1", "h1: NotFound"},
	}
	readsFree := []row{
		{linGet, "linearizable get reads then answers free", "read h1", "h1: free"},
		{staleGet, "stale get answers free", "h1: free", ""},
		{backup, "backup reads then copies the table", "read h1", "h1: backup at 1: 0 locks"},
	}
	readsHeldBy1 := []row{
		{linGet, "linearizable get reads then answers the holder", "read h1", heldBy1},
		{staleGet, "stale get answers the holder", heldBy1, ""},
		{backup, "backup reads then copies the table", "read h1", "h1: backup at 2: 1 locks"},
	}
	renewByHolder := row{renewBy1, "renew by holder proposes Renew", renewK, "h1: ok"}
	notLeader := func(id uint64) []row {
		nl := fmt.Sprintf("h1: NotLeader(%d)", id)
		return []row{
			{tryAcquire, "try-acquire is redirected", nl, ""},
			{waitAcquire, "waiting acquire is redirected", nl, ""},
			{releaseBy1, "release by holder is redirected", nl, ""},
			{releaseBy7, "release by non-holder is redirected", nl, ""},
			{renewBy1, "renew by holder is redirected", nl, ""},
			{renewBy7, "renew by non-holder is redirected", nl, ""},
			{linGet, "linearizable get is redirected", nl, ""},
			{staleGet, "stale get answers from the local table", heldBy1, ""},
			{backup, "backup is redirected", nl, ""},
		}
	}
	// Each state's rows, but for the rejected ones every state has.
	table := map[string][]row{
		"follower_of_3":           notLeader(3),
		"follower_without_leader": notLeader(0),
		"leader_before_its_term_barrier": {
			{tryAcquire, "try-acquire is unavailable", "h1: Unavailable", ""},
			{waitAcquire, "waiting acquire is unavailable", "h1: Unavailable", ""},
			{releaseBy1, "release by holder is unavailable", "h1: Unavailable", ""},
			{releaseBy7, "release by non-holder is unavailable", "h1: Unavailable", ""},
			{renewBy1, "renew by holder is unavailable", "h1: Unavailable", ""},
			{renewBy7, "renew by non-holder is unavailable", "h1: Unavailable", ""},
			{linGet, "linearizable get is unavailable", "h1: Unavailable", ""},
			{staleGet, "stale get answers from the local table", heldBy1, ""},
			{backup, "backup is unavailable", "h1: Unavailable", ""},
		},
		"leader_key_free": slices.Concat([]row{
			{tryAcquire, "try-acquire proposes Grant", grantK, "h1: token 1"},
			{waitAcquire, "waiting acquire proposes Grant", grantK, "h1: token 1"},
			{releaseBy1, "release reads then answers NotFound", "read h1", "h1: NotFound"},
			{renewBy1, "renew reads then answers NotFound", "read h1", "h1: NotFound"},
		}, nonHolder, readsFree),
		"leader_key_held_by_1": slices.Concat([]row{
			{tryAcquire, "try-acquire reads then answers Held", "read h1", "h1: Held"},
			{waitAcquire, "waiting acquire is queued", "waiting 1", ""},
			{releaseBy1, "release by holder proposes Release", releaseK, "h1: ok"},
			renewByHolder,
		}, nonHolder, readsHeldBy1),
		"leader_grant_in_flight": slices.Concat([]row{
			// "Held" is answered only from an applied Grant: the one in
			// flight may yet be dropped.
			{tryAcquire, "try-acquire is queued behind the grant", "waiting 1", ""},
			{waitAcquire, "waiting acquire is queued", "waiting 1", ""},
			{releaseBy1, "release reads then answers NotFound (rule 5: grant in flight)", "read h1", "h1: NotFound"},
			{renewBy1, "renew reads then answers NotFound (grant in flight)", "read h1", "h1: NotFound"},
		}, nonHolder, readsFree),
		"leader_key_held_with_waiters": slices.Concat([]row{
			{tryAcquire, "try-acquire reads then answers Held", "read h1", "h1: Held"},
			{waitAcquire, "waiting acquire queues behind the first waiter", "waiting 2", ""},
			{releaseBy1, "release by holder proposes Release and, in its entry, the first waiter's Grant",
				`propose Release{"k"}@2 + Grant{"k", 1000ms}@2; waiting 0`, `h1: ok | h101: token 2`},
			renewByHolder,
		}, nonHolder, readsHeldBy1),
	}
	for _, st := range lockStates {
		rows := slices.Concat(table[st.name], rejected)
		if len(rows) != 11 {
			t.Fatalf("state %s has %d rows, want all 11 requests", st.name, len(rows))
		}
		for _, r := range rows {
			t.Run(st.name+"/"+r.name, func(t *testing.T) {
				h := newLM(t, "")
				st.setup(h)
				h.now = 100 * ms
				uncommitted := len(h.log)
				h.expect("submit", h.submit(r.req), r.want)
				switch {
				case strings.HasPrefix(r.want, "read "):
					h.expect("confirmed", h.confirm(1, nil), r.then)
				case strings.HasPrefix(r.want, "propose "):
					for range uncommitted {
						h.commit() // the setup's own proposals
					}
					h.expect("committed", h.commitAll(), r.then)
				case r.then != "":
					t.Fatalf("row has a follow-up but neither reads nor proposes")
				}
			})
			if strings.HasPrefix(r.want, "read ") {
				t.Run(st.name+"/"+r.name+"/failed_read_answers_its_error", func(t *testing.T) {
					h := newLM(t, "")
					st.setup(h)
					h.now = 100 * ms
					h.submit(r.req)
					h.expect("confirmed with error", h.confirm(1, ErrUnavailable), "h1: Unavailable")
					h.expect("confirmed again", h.confirm(1, nil), "")
				})
			}
		}
	}
}

// TestSubmitRejectsBadInput: rule 10, in every role; the check comes before
// any other, and nothing is proposed or read for bad input.
func TestSubmitRejectsBadInput(t *testing.T) {
	long := strings.Repeat("x", 257)
	rows := []struct {
		name string
		req  Request
		want string
	}{
		{"acquire_empty_key", Request{Op: OpAcquire, Key: "", Lease: time.Second}, "InvalidArgument"},
		{"acquire_257_byte_key", Request{Op: OpAcquire, Key: long, Lease: time.Second}, "InvalidArgument"},
		{"acquire_lease_9ms", Request{Op: OpAcquire, Key: "k", Lease: 9 * ms}, "InvalidArgument"},
		{"acquire_lease_0", Request{Op: OpAcquire, Key: "k"}, "InvalidArgument"},
		{"acquire_lease_over_1h", Request{Op: OpAcquire, Key: "k", Lease: time.Hour + ms}, "InvalidArgument"},
		{"release_empty_key", Request{Op: OpRelease, Key: "", Token: 1}, "InvalidArgument"},
		{"release_257_byte_key", Request{Op: OpRelease, Key: long, Token: 1}, "InvalidArgument"},
		{"renew_empty_key", Request{Op: OpRenew, Key: "", Token: 1, Lease: time.Second}, "InvalidArgument"},
		{"renew_lease_9ms", Request{Op: OpRenew, Key: "k", Token: 1, Lease: 9 * ms}, "InvalidArgument"},
		{"renew_lease_over_1h", Request{Op: OpRenew, Key: "k", Token: 1, Lease: time.Hour + ms}, "InvalidArgument"},
		{"get_empty_key", Request{Op: OpGet, Key: ""}, "InvalidArgument"},
		{"stale_get_257_byte_key", Request{Op: OpGet, Key: long, Stale: true}, "InvalidArgument"},
		{"unknown_op_0", Request{Key: "k"}, "InvalidArgument"},
		{"unknown_op_99", Request{Op: 99, Key: "k"}, "InvalidArgument"},
		// The bounds themselves are valid.
		{"acquire_lease_10ms_is_valid", Request{Op: OpAcquire, Key: strings.Repeat("x", 256), Lease: 10 * ms}, ""},
		{"acquire_lease_1h_is_valid", Request{Op: OpAcquire, Key: "k", Lease: time.Hour}, ""},
	}
	roles := []struct {
		name  string
		setup func(h *lmHarness)
	}{
		{"follower", func(h *lmHarness) { h.follow(2, 3) }},
		{"leader", func(h *lmHarness) { h.lead(2) }},
	}
	for _, role := range roles {
		for _, r := range rows {
			t.Run(role.name+"/"+r.name, func(t *testing.T) {
				h := newLM(t, "")
				role.setup(h)
				r.req.Handle = 1
				got := h.submit(r.req)
				if r.want == "" {
					if strings.Contains(got, "InvalidArgument") {
						t.Fatalf("valid request rejected: %s", got)
					}
					return
				}
				h.expect("submit", got, "h1: "+r.want)
				if len(h.lm.requests) != 0 {
					t.Fatalf("rejected request kept: %v", h.lm.requests)
				}
			})
		}
	}
}

func TestStoppedManagerDecidesNothing(t *testing.T) {
	h := leaderHoldingK(t)
	h.submit(req(waitAcquire, 101))
	h.submit(req(renewBy1, 102))
	h.expect("stop", h.do(h.lm.Stop), "h101: Unavailable; h102: OutcomeUnknown; waiting 0")
	h.expect("acquire", h.submit(req(tryAcquire, 1)), "h1: Stopped")
	h.expect("release", h.submit(req(releaseBy1, 2)), "h2: Stopped")
	h.expect("get", h.submit(req(linGet, 3)), "h3: Stopped")
	h.expect("tick", h.tick(10*time.Second), "")
}

// Rule 4: waiters are granted in arrival order, one Grant in flight at a
// time, whether the key is freed by a Release or an Expire.
func TestWaitersAreGrantedFIFO(t *testing.T) {
	h := newLeader(t)
	h.submit(req(tryAcquire, 100))
	h.expect("first grant", h.commit(), "h100: token 1")
	h.expect("waiter 2", h.submit(req(waitAcquire, 2)), "waiting 1")
	h.expect("waiter 3", h.submit(req(waitAcquire, 3)), "waiting 2")
	h.expect("waiter 4", h.submit(req(waitAcquire, 4)), "waiting 3")
	h.expect("release by 1", h.submit(req(releaseBy1, 10)), `propose Release{"k"}@2 + Grant{"k", 1000ms}@2; waiting 2`)
	h.expect("release applies", h.commit(), `h10: ok`)
	h.expect("first waiter granted", h.commit(), "h2: token 2")
	h.expect("release by 2", h.submit(Request{Handle: 11, Op: OpRelease, Key: "k", Token: 2}),
		`propose Release{"k"}@2 + Grant{"k", 1000ms}@2; waiting 1`)
	h.expect("release applies", h.commit(), `h11: ok`)
	h.expect("second waiter granted", h.commit(), "h3: token 3")
	// Token 3's lease runs out: the Expire frees the key for the last waiter.
	h.expect("lease runs out", h.tick(time.Second+100*ms), `propose Expire{"k", 3}@2 + Grant{"k", 1000ms}@2; waiting 0`)
	h.expect("expire applies", h.commit(), "")
	h.expect("last waiter granted", h.commit(), "h4: token 4")
	h.settled()
}

// The handoff's ablation (SetHandoff(false)): the next waiter's Grant is
// proposed only once the Release or Expire that frees its key has applied,
// one commit later.
func TestHandoffAblationGrantsAfterTheFreeingCommandApplies(t *testing.T) {
	h := newLM(t, "")
	h.lm.SetHandoff(false)
	h.lead(2)
	h.submit(req(tryAcquire, 100))
	h.expect("first grant", h.commit(), "h100: token 1")
	h.expect("waiter 2", h.submit(req(waitAcquire, 2)), "waiting 1")
	h.expect("waiter 3", h.submit(req(waitAcquire, 3)), "waiting 2")
	h.expect("release by 1", h.submit(req(releaseBy1, 10)), `propose Release{"k"}@2`)
	h.expect("release applies: first waiter's Grant", h.commit(), `h10: ok; propose Grant{"k", 1000ms}@2; waiting 1`)
	h.expect("first waiter granted", h.commit(), "h2: token 2")
	h.expect("lease runs out", h.tick(time.Second+100*ms), `propose Expire{"k", 2}@2`)
	h.expect("expire applies: last waiter's Grant", h.commit(), `propose Grant{"k", 1000ms}@2; waiting 0`)
	h.expect("last waiter granted", h.commit(), "h3: token 3")
	h.settled()
}

// A waiter whose wait runs out while the key is held answers Held, after a
// read confirms the key is held.
func TestWaiterTimesOutWhileHeld(t *testing.T) {
	h := leaderHoldingK(t)
	h.now = 100 * ms
	h.expect("queue for 500ms", h.submit(Request{Handle: 1, Op: OpAcquire, Key: "k", Lease: time.Second, Wait: 500 * ms}), "waiting 1")
	h.expect("before its deadline", h.tick(599*ms), "")
	h.expect("at its deadline", h.tick(600*ms), "read h1; waiting 0")
	h.expect("confirmed held", h.confirm(1, nil), "h1: Held")
	h.settled()
}

// A waiter whose wait ran out is answered as a try-acquire would be now:
// if the key was freed while the read confirmed it, it gets the lock.
func TestWaiterTimedOutGetsKeyFreedDuringItsRead(t *testing.T) {
	h := leaderHoldingK(t)
	h.submit(Request{Handle: 1, Op: OpAcquire, Key: "k", Lease: time.Second, Wait: 500 * ms})
	h.expect("wait runs out", h.tick(500*ms), "read h1; waiting 0")
	h.submit(req(releaseBy1, 2))
	h.expect("release applies", h.commit(), "h2: ok")
	h.expect("confirmed: key free", h.confirm(1, nil), `propose Grant{"k", 1000ms}@2`)
	h.expect("granted", h.commit(), "h1: token 2")
	h.settled()
}

// Rule 6: only the leader past its barrier proposes Expire{key, token},
// when its local deadline passes, at most once a second per lease, and not
// while a Renew of the key is in flight.
func TestTickProposesExpire(t *testing.T) {
	t.Run("follower_never_proposes_expire", func(t *testing.T) {
		h := newLM(t, "")
		h.follow(2, 3)
		h.foreign(2, grantK1000ms)
		h.expect("past the deadline", h.tick(5*time.Second), "")
		if _, held := h.lm.Machine().Get("k"); !held {
			t.Fatal("a follower removed a lock on its own")
		}
	})
	t.Run("leader_before_barrier_waits_for_it", func(t *testing.T) {
		h := newLM(t, "")
		h.follow(2, 3)
		h.foreign(2, grantK1000ms)
		h.do(func() { h.lm.Become(true, 3, 1) })
		h.expect("before the barrier", h.tick(5*time.Second), "")
		h.barrier(3)
		h.expect("after the barrier", h.tick(5*time.Second+ms), `propose Expire{"k", 1}@3`)
	})
	t.Run("leader_expires_at_the_deadline_not_before", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.expect("1ms before", h.tick(999*ms), "")
		h.expect("at the deadline", h.tick(1000*ms), `propose Expire{"k", 1}@2`)
		h.expect("applies", h.commit(), "")
		h.expect("nothing left to expire", h.tick(10*time.Second), "")
		h.settled()
	})
	t.Run("leader_reproposes_a_lost_expire_once_a_second", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.expect("deadline", h.tick(1000*ms), `propose Expire{"k", 1}@2`)
		h.take() // lost
		h.expect("500ms later", h.tick(1500*ms), "")
		h.expect("999ms later", h.tick(1999*ms), "")
		h.expect("a second later", h.tick(2000*ms), `propose Expire{"k", 1}@2`)
	})
	t.Run("dropped_expire_is_reproposed_at_once", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.tick(1000 * ms)
		h.expect("dropped", h.do(func() { h.lm.Drop(h.now, []fsm.Envelope{h.take()}) }), "")
		h.expect("next tick", h.tick(1001*ms), `propose Expire{"k", 1}@2`)
	})
	t.Run("no_expire_while_a_renew_is_in_flight", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.now = 900 * ms
		h.expect("renew", h.submit(req(renewBy1, 1)), `propose Renew{"k", 1, 2000ms}@2`)
		h.expect("deadline passes", h.tick(1000*ms), "")
		h.expect("long after", h.tick(3000*ms), "")
		h.expect("renew applies at 3s", h.commit(), "h1: ok")
		h.expect("old deadline long gone", h.tick(4999*ms), "")
		h.expect("new deadline", h.tick(5000*ms), `propose Expire{"k", 1}@2`)
	})
}

// An Expire and a Renew of the same token never both succeed.
func TestExpireAndRenewNeverBothSucceed(t *testing.T) {
	t.Run("expire_first_then_renew_applies_NotFound", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.expect("deadline", h.tick(1000*ms), `propose Expire{"k", 1}@2`)
		// The applied table still shows token 1: the Renew is proposed
		// behind the Expire, and applies as NotFound.
		h.expect("renew", h.submit(req(renewBy1, 1)), `propose Renew{"k", 1, 2000ms}@2`)
		h.expect("expire applies", h.commit(), "")
		h.expect("renew applies", h.commit(), "h1: NotFound")
		if _, held := h.lm.Machine().Get("k"); held {
			t.Fatal("k still held")
		}
		h.settled()
	})
	t.Run("renew_in_flight_then_no_expire", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.now = 999 * ms
		h.submit(req(renewBy1, 1))
		h.expect("deadline passes", h.tick(1000*ms), "")
		h.expect("renew applies", h.commit(), "h1: ok")
		if l, held := h.lm.Machine().Get("k"); !held || l.Token != 1 || l.LeaseMS != 2000 {
			t.Fatalf("k = %+v held=%v, want token 1 with 2000ms", l, held)
		}
		h.settled()
	})
	t.Run("dropped_renew_lets_expire_through", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.now = 999 * ms
		h.submit(req(renewBy1, 1))
		h.expect("renew dropped", h.do(func() { h.lm.Drop(h.now, []fsm.Envelope{h.take()}) }), "h1: Unavailable")
		h.expect("deadline", h.tick(1000*ms), `propose Expire{"k", 1}@2`)
	})
}

// Rule 4: a try-acquire that meets a Grant in flight waits for that Grant's
// outcome rather than answer Held from a table that does not show it.
func TestTryAcquireMeetsGrantInFlight(t *testing.T) {
	setup := func(t *testing.T) *lmHarness {
		h := newLeader(t)
		h.submit(req(tryAcquire, 100))
		h.expect("try-acquire", h.submit(req(tryAcquire, 1)), "waiting 1")
		return h
	}
	t.Run("grant_applies_then_Held", func(t *testing.T) {
		h := setup(t)
		h.expect("grant applies", h.commit(), "h100: token 1")
		h.expect("next tick", h.tick(ms), "read h1; waiting 0")
		h.expect("confirmed", h.confirm(1, nil), "h1: Held")
		h.settled()
	})
	t.Run("grant_dropped_then_it_gets_the_lock", func(t *testing.T) {
		h := setup(t)
		h.expect("drop", h.do(func() { h.lm.Drop(h.now, []fsm.Envelope{h.take()}) }),
			`h100: Unavailable; propose Grant{"k", 1000ms}@2; waiting 0`)
		h.expect("granted", h.commit(), "h1: token 1")
		h.settled()
	})
	t.Run("grant_rejected_then_it_gets_the_lock", func(t *testing.T) {
		// Defensive: a Grant that applies as GrantRejected is an error,
		// never a success, and frees the queue.
		h := setup(t)
		h.foreign(2, fsm.Command{Op: fsm.OpGrant, Key: "k", LeaseMS: 50})
		h.foreign(2, fsm.Command{Op: fsm.OpRelease, Key: "k"})
		h.foreign(2, fsm.Command{Op: fsm.OpGrant, Key: "k", LeaseMS: 50}) // token 2 holds k
		h.expect("our grant applies", h.commit(), "h100: GrantRejected")
		h.expect("tick", h.tick(ms), "read h1; waiting 0")
		h.expect("confirmed", h.confirm(1, nil), "h1: Held")
	})
}

// Drop: raft refused the proposal, so it did not happen: the requester
// hears Unavailable and the next waiter is granted.
func TestDropOfRefusedGrant(t *testing.T) {
	h := newLeader(t)
	h.submit(req(tryAcquire, 1))
	h.expect("waiter", h.submit(req(waitAcquire, 2)), "waiting 1")
	h.expect("drop", h.do(func() { h.lm.Drop(h.now, []fsm.Envelope{h.take()}) }),
		`h1: Unavailable; propose Grant{"k", 1000ms}@2; waiting 0`)
	h.expect("waiter granted token 1", h.commit(), "h2: token 1")
	h.settled()
}

// DropStale: a command decided in an earlier term is dropped without the
// current term's bookkeeping: a Renew of this term stays in flight, so no
// Expire is proposed under it.
func TestDropStaleKeepsThisTermsRenewingMark(t *testing.T) {
	h := leaderHoldingK(t)
	h.now = 900 * ms
	h.expect("renew in term 2", h.submit(req(renewBy1, 1)), `propose Renew{"k", 1, 2000ms}@2`)
	stale := h.take()
	// A new term: the term-2 renew was proposed, its outcome is unknown.
	h.expect("new term", h.do(func() { h.lm.Become(true, 3, 1) }), "h1: OutcomeUnknown")
	h.barrier(3)
	h.expect("renew in term 3", h.submit(req(renewBy1, 2)), `propose Renew{"k", 1, 2000ms}@3`)
	h.expect("drop the stale renew", h.do(func() { h.lm.DropStale(stale) }), "")
	h.expect("deadline: renew of term 3 still in flight", h.tick(1000*ms), "")
	h.expect("renew applies", h.commit(), "h2: ok")
	h.settled()
}

// DropStale answers a requester the manager still waits for.
func TestDropStaleAnswersItsRequester(t *testing.T) {
	h := newLeader(t)
	h.submit(req(tryAcquire, 1))
	env := h.take()
	// The core calls DropStale only for a command of an earlier term,
	// whose in-flight mark the new term cleared; this one is of the
	// current term, and the mark it leaves is outside the invariants.
	h.invariants = false
	h.expect("drop stale", h.do(func() { h.lm.DropStale(env) }), "h1: Unavailable")
	if len(h.lm.requests) != 0 || len(h.lm.pending) != 0 {
		t.Fatalf("requester kept: %v %v", h.lm.requests, h.lm.pending)
	}
}

// Become: losing leadership or a new term ends every call in progress:
// proposed ones with OutcomeUnknown, queued or reading ones with
// Unavailable (nothing was proposed for them). Later applies of the old
// term's commands answer nobody.
func TestBecomeEndsCallsInProgress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		become func(lm *LockManager)
		after  string // a try-acquire afterwards
	}{
		{"to_follower", func(lm *LockManager) { lm.Become(false, 3, 2) }, "h9: NotLeader(2)"},
		{"to_candidate", func(lm *LockManager) { lm.Become(false, 3, 0) }, "h9: NotLeader(0)"},
		{"to_leader_of_a_new_term", func(lm *LockManager) { lm.Become(true, 3, 1) }, "h9: Unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := leaderHoldingK(t) // k held by 1
			h.expect("grant x in flight", h.submit(Request{Handle: 1, Op: OpAcquire, Key: "x", Lease: time.Second}), `propose Grant{"x", 1000ms}@2`)
			h.expect("waiter on k", h.submit(req(waitAcquire, 2)), "waiting 1")
			h.expect("get reading", h.submit(req(linGet, 3)), "read h3")
			h.expect("renew in flight", h.submit(req(renewBy1, 4)), `propose Renew{"k", 1, 2000ms}@2`)
			h.expect("release reading", h.submit(req(releaseBy7, 5)), "read h5")
			h.expect("become", h.do(func() { tc.become(h.lm) }),
				"h1: OutcomeUnknown; h2: Unavailable; h3: Unavailable; h4: OutcomeUnknown; h5: Unavailable; waiting 0")
			h.expect("late read confirmation", h.confirm(3, nil), "")
			h.expect("old grant commits", h.commit(), "")
			h.expect("old renew commits", h.commit(), "")
			h.expect("try-acquire", h.submit(req(tryAcquire, 9)), tc.after)
			if l, _ := h.lm.Machine().Get("x"); l.Token != 2 {
				t.Fatalf("x = %+v, the committed grant must still apply", l)
			}
			h.settled()
		})
	}
}

// Rule 7: a requester that is gone leaves the queue; a grant nobody will
// use is released as soon as it applies.
func TestAbandon(t *testing.T) {
	t.Run("queued_acquire_leaves_the_queue", func(t *testing.T) {
		h := leaderHoldingK(t)
		h.submit(req(waitAcquire, 1))
		h.submit(req(waitAcquire, 2))
		h.expect("abandon", h.do(func() { h.lm.Abandon(1, "", 0) }), "h1: Unavailable; waiting 1")
		h.expect("release hands the key to the live waiter", h.submit(req(releaseBy1, 3)),
			`propose Release{"k"}@2 + Grant{"k", 1000ms}@2; waiting 0`)
		h.expect("release applies", h.commit(), "h3: ok")
		h.expect("granted", h.commit(), "h2: token 2")
		h.settled()
	})
	t.Run("reading_request_is_ended", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(linGet, 1))
		h.expect("abandon", h.do(func() { h.lm.Abandon(1, "", 0) }), "h1: Unavailable")
		h.expect("confirmed later", h.confirm(1, nil), "")
		h.settled()
	})
	t.Run("proposed_grant_is_released_when_it_applies", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(tryAcquire, 1))
		h.submit(req(waitAcquire, 2))
		h.expect("abandon", h.do(func() { h.lm.Abandon(1, "", 0) }), "")
		h.expect("grant applies", h.commit(), `propose Release{"k"}@2; ghost releases 1`)
		h.expect("ghost release applies: next waiter", h.commit(), `propose Grant{"k", 1000ms}@2; waiting 0`)
		h.expect("granted", h.commit(), "h2: token 2")
		h.settled()
	})
	t.Run("granted_after_the_requester_left_is_released", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(tryAcquire, 1))
		h.expect("granted", h.commit(), "h1: token 1")
		h.expect("answer reached a requester that left", h.do(func() { h.lm.Abandon(1, "k", 1) }),
			`propose Release{"k"}@2; ghost releases 1`)
		h.commit()
		if _, held := h.lm.Machine().Get("k"); held {
			t.Fatal("ghost lock still held")
		}
	})
	t.Run("late_abandon_spares_a_newer_grant", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(tryAcquire, 1))
		h.commit()
		h.submit(req(releaseBy1, 2))
		h.commit()
		h.submit(req(tryAcquire, 3))
		h.expect("token 2", h.commit(), "h3: token 2")
		h.expect("abandon token 1", h.do(func() { h.lm.Abandon(1, "k", 1) }), "")
	})
	t.Run("follower_proposes_no_ghost_release", func(t *testing.T) {
		h := newLM(t, "")
		h.follow(2, 3)
		h.foreign(2, grantK1000ms)
		h.expect("abandon", h.do(func() { h.lm.Abandon(1, "k", 1) }), "")
	})
	// Rule 7 belongs to the leader the call went to. Another member's
	// Grant that applies after this member took over may have been
	// answered Granted: its proposer applied it and answered, then lost
	// its leadership before the others learned that it committed. This
	// leader cannot tell, so it leaves the lock to its holder and its
	// lease.
	t.Run("grant_of_an_earlier_leader_is_not_a_ghost", func(t *testing.T) {
		h := newLM(t, "")
		h.expect("lead term 3", h.do(func() { h.lm.Become(true, 3, 1) }), "")
		h.foreign(2, grantK1000ms) // member 3's Grant of term 2: no release proposed
		h.expect("barrier", h.barrier(3), "")
		h.expect("k", h.holder("k"), "held by 1")
	})
	// Member 1 proposes a Grant in term 2 (its caller leaving, or not),
	// steps down, leads term 4, and the Grant applies before term 4's
	// barrier; what the barrier proposes is the test's.
	leadsAgainWhenItsGrantApplies := func(t *testing.T, callerLeaves bool) *lmHarness {
		h := newLeader(t)
		h.expect("acquire", h.submit(req(tryAcquire, 1)), `propose Grant{"k", 1000ms}@2`)
		if callerLeaves {
			h.expect("the caller leaves", h.do(func() { h.lm.Abandon(1, "k", 0) }), "")
		}
		h.expect("step down", h.do(func() { h.lm.Become(false, 3, 3) }), "h1: OutcomeUnknown")
		h.expect("lead term 4", h.do(func() { h.lm.Become(true, 4, 1) }), "")
		h.expect("the Grant of term 2 applies", h.commit(), "")
		return h
	}
	// A caller still there was answered OutcomeUnknown when member 1
	// stepped down: it is not gone, and may since have read the lock with
	// get and kept it.
	t.Run("own_grant_of_an_earlier_term_is_not_a_ghost", func(t *testing.T) {
		h := leadsAgainWhenItsGrantApplies(t, false)
		h.expect("barrier", h.barrier(4), "")
		h.expect("k", h.holder("k"), "held by 1")
	})
	// A caller gone before member 1 stopped leading was told nothing: the
	// Grant is a ghost, released when the new term's barrier passes
	// (before it, this leader decides nothing).
	t.Run("own_grant_whose_caller_left_is_released_when_it_leads_again", func(t *testing.T) {
		h := leadsAgainWhenItsGrantApplies(t, true)
		h.expect("barrier", h.barrier(4), `propose Release{"k"}@4; ghost releases 1`)
		h.expect("the release applies", h.commit(), "")
		h.expect("the ghost lock", h.holder("k"), "free")
		h.settled()
	})
	// Every orphan that applies before the barrier is a ghost, not only
	// the first: an entry of the orphans' own term must not clear them.
	t.Run("every_orphan_applied_before_the_barrier_is_released", func(t *testing.T) {
		h := newLeader(t)
		h.submit(Request{Handle: 1, Op: OpAcquire, Key: "a", Lease: time.Second})
		h.submit(Request{Handle: 2, Op: OpAcquire, Key: "b", Lease: time.Second})
		h.do(func() { h.lm.Abandon(1, "a", 0) })
		h.do(func() { h.lm.Abandon(2, "b", 0) })
		h.expect("step down", h.do(func() { h.lm.Become(false, 3, 3) }), "h1: OutcomeUnknown; h2: OutcomeUnknown")
		h.expect("lead term 4", h.do(func() { h.lm.Become(true, 4, 1) }), "")
		h.expect("both Grants of term 2 apply", h.commitAll(), "")
		h.expect("barrier", h.barrier(4), `propose Release{"a"}@4; propose Release{"b"}@4; ghost releases 2`)
	})
	// An orphan whose Grant never commits (a later leader's log replaced
	// it) is forgotten once an entry of a later term applies.
	t.Run("orphans_are_forgotten_after_an_entry_of_a_later_term", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(tryAcquire, 1))
		h.do(func() { h.lm.Abandon(1, "k", 0) })
		h.do(func() { h.lm.Become(false, 3, 3) })
		h.take() // the Grant never reaches the log
		if len(h.lm.orphans) != 1 {
			t.Fatalf("orphans after the step-down: %v, want the Grant's", h.lm.orphans)
		}
		h.expect("an entry of term 2 applies", h.barrier(2), "")
		if len(h.lm.orphans) != 1 {
			t.Fatalf("an entry of the orphans' own term cleared them: %v", h.lm.orphans)
		}
		h.expect("the next leader's barrier", h.barrier(3), "")
		if len(h.lm.orphans) != 0 {
			t.Fatalf("orphans kept past an entry of a later term: %v", h.lm.orphans)
		}
	})
	t.Run("own_orphaned_grant_applied_as_a_follower_is_left_to_its_lease", func(t *testing.T) {
		h := newLeader(t)
		h.submit(req(tryAcquire, 1))
		h.do(func() { h.lm.Abandon(1, "k", 0) })
		h.expect("step down", h.do(func() { h.lm.Become(false, 3, 3) }), "h1: OutcomeUnknown")
		h.expect("the Grant of term 2 applies", h.commit(), "")
		h.expect("the next leader's barrier", h.barrier(3), "")
		h.expect("lead term 4", h.do(func() { h.lm.Become(true, 4, 1) }), "")
		h.expect("barrier: a follower released nothing", h.barrier(4), "")
		h.expect("k", h.holder("k"), "held by 1")
	})
}

// Rule 6: after a restart or a snapshot install every lease restarts in
// full from the local clock: a deadline is never shorter than a lease.
func TestRestoreRestartsLeasesInFull(t *testing.T) {
	h := newLeader(t)
	h.submit(req(tryAcquire, 100))
	h.commit() // deadline 1000ms
	snap := h.lm.Machine().Snapshot()
	for _, tc := range []struct {
		name string
		lm   func() *LockManager
	}{
		{"restart", func() *LockManager { return NewLockManager(1, "", 1000) }},
		{"snapshot_install", func() *LockManager { return h.lm }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := fsm.Restore(snap)
			if err != nil {
				t.Fatal(err)
			}
			r := &lmHarness{t: t, lm: tc.lm(), ops: map[uint64]Op{}, done: map[uint64]Answer{},
				ids: map[fsm.RequestID]bool{}}
			r.seqStart = r.lm.seq
			r.now = 900 * ms
			r.lm.Restore(m, 10, 2, r.now)
			r.index = 10
			r.expect("stale get", r.submit(req(staleGet, 1)), "h1: held by 1, 1000ms left")
			r.lead(3)
			r.expect("at the old deadline", r.tick(1000*ms), "")
			r.expect("1ms before the restarted deadline", r.tick(1899*ms), "")
			r.expect("restarted deadline", r.tick(1900*ms), `propose Expire{"k", 1}@3`)
		})
	}
}

// GetRemaining is the answering member's lease, never negative.
func TestGetRemainingNeverNegative(t *testing.T) {
	h := newLM(t, "")
	h.follow(2, 3)
	h.foreign(2, grantK1000ms)
	h.now = 5 * time.Second
	h.expect("stale get", h.submit(req(staleGet, 1)), "h1: held by 1, 0ms left")
}

// Each planted bug breaks one rule; with no bug planted the same scenario
// keeps it. The rows document what each bug changes.
func TestPlantedBugsBreakTheirRule(t *testing.T) {
	held := func(h *lmHarness) {
		h.lead(2)
		h.submit(req(tryAcquire, 100))
		h.commit()
	}
	rows := []struct {
		bug, name string
		run       func(h *lmHarness) string
		correct   string
		broken    string
	}{
		{BugNoTermBarrier, "new_leader_grants_before_applying_an_entry_of_its_term",
			func(h *lmHarness) string {
				h.follow(2, 3)
				h.do(func() { h.lm.Become(true, 3, 1) })
				return h.submit(tryAcquire)
			},
			"h1: Unavailable", `propose Grant{"k", 1000ms}@3`},
		{BugReleaseSkipsOwner, "release_by_non_holder_is_proposed",
			func(h *lmHarness) string { held(h); return h.submit(releaseBy7) },
			"read h1", `propose Release{"k"}@2`},
		{BugTokenAtPropose, "leader_picks_the_token_and_it_differs_from_the_table",
			func(h *lmHarness) string {
				h.lead(2)
				s := h.submit(tryAcquire) + " | " + h.commit()
				l, _ := h.lm.Machine().Get("k")
				return s + fmt.Sprintf(" | table token %d", l.Token)
			},
			`propose Grant{"k", 1000ms}@2 | h1: token 1 | table token 1`,
			`propose Grant{"k", 1000ms}@2 tag=2 | h1: token 2 | table token 1`},
		{BugAckBeforeCommit, "acquire_answered_at_propose",
			func(h *lmHarness) string { h.lead(2); return h.submit(tryAcquire) },
			`propose Grant{"k", 1000ms}@2`, `h1: token 1; propose Grant{"k", 1000ms}@2`},
		{BugAckBeforeCommit, "release_answered_at_propose",
			func(h *lmHarness) string { held(h); return h.submit(releaseBy1) },
			`propose Release{"k"}@2`, `h1: ok; propose Release{"k"}@2`},
		{BugEarlyExpire, "leader_expires_at_half_the_lease",
			func(h *lmHarness) string { held(h); return h.tick(500 * ms) },
			"", `propose Expire{"k", 1}@2`},
		{BugFollowerLocalExpire, "follower_drops_a_lock_without_a_committed_expire",
			func(h *lmHarness) string {
				h.follow(2, 3)
				h.foreign(2, grantK1000ms)
				return h.tick(1000*ms) + h.submit(staleGet)
			},
			"h1: held by 1, 0ms left", "h1: free"},
		{BugStaleRead, "follower_answers_a_linearizable_get_locally",
			func(h *lmHarness) string {
				h.follow(2, 3)
				h.foreign(2, grantK1000ms)
				return h.submit(linGet)
			},
			"h1: NotLeader(3)", "h1: held by 1, 1000ms left"},
		{BugStaleRead, "leader_answers_a_linearizable_get_without_a_quorum_read",
			func(h *lmHarness) string { held(h); return h.submit(linGet) },
			"read h1", "h1: held by 1, 1000ms left"},
		{BugHandoffGrantFirst, "handoff_places_the_grant_before_the_release_in_their_entry",
			func(h *lmHarness) string {
				held(h)
				h.submit(req(waitAcquire, 101))
				return h.submit(releaseBy1) + " | " + h.commitAll()
			},
			`propose Release{"k"}@2 + Grant{"k", 1000ms}@2; waiting 0 | h1: ok | h101: token 2`,
			`propose Grant{"k", 1000ms}@2 + Release{"k"}@2; waiting 0 | h101: GrantRejected | h1: ok`},
		{BugBackupWithoutReadIndex, "leader_copies_its_table_without_a_quorum_read",
			func(h *lmHarness) string { held(h); return h.submit(backup) },
			"read h1", "h1: backup at 2: 1 locks"},
		{BugHolderCallDuringHandoff, "release_meeting_a_handoff_is_answered_before_it_applies",
			func(h *lmHarness) string {
				held(h)
				h.submit(req(waitAcquire, 101))
				h.tick(1000 * ms) // Expire and the waiter's Grant in flight
				return h.submit(releaseBy1)
			},
			"", "read h1"},
		{BugGhostAfterAnotherLeader, "orphan_another_leader_committed_is_released",
			func(h *lmHarness) string {
				h.lead(2)
				h.submit(req(tryAcquire, 1))
				h.do(func() { h.lm.Abandon(1, "k", 0) })
				h.do(func() { h.lm.Become(false, 3, 3) })
				h.do(func() { h.lm.Become(true, 4, 1) })
				h.commit()   // the orphaned Grant of term 2
				h.barrier(3) // member 3's entry of term 3
				return h.barrier(4)
			},
			"", `propose Release{"k"}@4; ghost releases 1`},
		{BugExpireIgnoresToken, "expiry_proposes_a_release_that_ignores_the_token",
			func(h *lmHarness) string { held(h); return h.tick(1000 * ms) },
			`propose Expire{"k", 1}@2`, `propose Release{"k"}@2`},
	}
	for _, r := range rows {
		t.Run(r.bug+"/"+r.name, func(t *testing.T) {
			if !ValidBug(r.bug) {
				t.Fatalf("unknown bug %q", r.bug)
			}
			check(t, "without the bug", r.run(newLM(t, "")), r.correct)
			check(t, "with "+r.bug, r.run(newLM(t, r.bug)), r.broken)
		})
	}
}

// Package checker decides whether a raftlock history is correct: per-key
// linearizability against a lock model whose leases may silently expire
// (porcupine), fencing-token uniqueness and order, lease timing, the fenced
// resource's integrity, and replica convergence. It also writes the reports
// (JSON verdict, Markdown summary, porcupine visualisations, a latency plot).
package checker

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sync/errgroup"

	"github.com/raftlock/raftlock/checker/history"
)

// Check statuses.
const (
	StatusOK        = "ok"
	StatusViolation = "violation"
	StatusUnknown   = "unknown"
	StatusSkipped   = "skipped"
)

// Verdicts.
const (
	VerdictValid   = "valid"
	VerdictInvalid = "invalid"
	VerdictUnknown = "unknown"
	// VerdictInterrupted is a run Ctrl-C cut short, in which no check
	// found a violation: neither valid nor failing (Verdict.Interrupted).
	VerdictInterrupted = "interrupted"
)

// Exit codes of raftlock check and raftlock chaos.
const (
	ExitValid     = 0
	ExitViolation = 1
	ExitUnknown   = 2
	ExitHarness   = 3
	// ExitInterrupted is a run Ctrl-C cut short with no violation found,
	// as a shell reports SIGINT.
	ExitInterrupted = 130
)

// NodeDigest is one member's state digest at an applied index.
type NodeDigest struct {
	Node    int    `json:"node"`
	Applied uint64 `json:"applied"`
	Digest  string `json:"digest"`
}

// Resolution says, from the committed log, whether an info acquire (named
// by its invoke event's index) happened, and with which token.
type Resolution struct {
	Index    int64  `json:"index"`
	F        string `json:"f,omitempty"` // release or renew; empty: acquire
	Happened bool   `json:"happened"`
	Token    uint64 `json:"token,omitempty"`
}

// Options tune Check.
type Options struct {
	Resolutions    []Resolution  // info operations settled after the run
	Timeout        time.Duration // linearizability time budget; default 60s
	LeaseTolerance time.Duration // slack for the lease timing check
	Digests        []NodeDigest  // for the convergence check; none: skipped
	// Log is the committed log the post-run audit read: it settles info
	// operations (added to Resolutions) and is checked against the history
	// (the audit check). nil: the audit is skipped.
	Log *CommittedLog
	// ClockOverride declares clocks unreliable beyond what the history's
	// clock events record (raftlock check --clock-faults): lease timing is
	// then reported and does not decide. Without it, timing is decided from
	// the history's own clock fault windows.
	ClockOverride bool
	// Crashes lists members that exited on their own during the run (a
	// panic on restart, say), or that lost entries they had acknowledged
	// (a leader's heartbeat committed past their stored log), as the
	// harness saw them: a lock service whose members cannot restart, or
	// forget what they promised, is broken, though no history shows it. nil:
	// not known (raftlock check), the check is skipped.
	Crashes []string
	// Newcomers is what the chaos harness saw of membership changes: nil
	// for raftlock check (the newcomer-stuck check is skipped).
	Newcomers *Newcomers
	// SnapshotIntegrity is what the chaos harness read of damaged
	// snapshots: nil for raftlock check (the snapshot-integrity check is
	// skipped).
	SnapshotIntegrity *SnapshotIntegrity
	// Backups are the backups the harness took during the run, for the
	// backup-freshness check: nil when it took none (the check is
	// skipped).
	Backups []Backup
	// StorageLoss is what the chaos harness's corrupt family saw of
	// members restarted over damaged data: nil when it did not run (the
	// storage-loss check is skipped).
	StorageLoss *StorageLoss
	// Notes are said with the verdict: what reading the inputs passed
	// over (a history's last line cut short).
	Notes []string
}

// SnapshotIntegrity is the evidence of the snapshot-integrity check.
// Corrupt is, per member, its raftlock_snapshots_corrupt_total summed
// over its processes: snapshots received whose data does not decode,
// which a correct cluster never sends. Forged is, per member, the
// undecodable snapshots the garbage nemesis sent it (or tried), the most
// it may count without a bug; nil when no garbage family ran.
type SnapshotIntegrity struct {
	Corrupt map[int]int
	Forged  map[int]int
}

// Newcomers is the membership changes' evidence: members added, and each
// problem found (a new member that did not catch up within the bound, a
// member that refused a snapshot lacking it).
type Newcomers struct {
	Added    int
	Problems []string
}

// Violation is one thing found wrong, with the events involved.
type Violation struct {
	Key     string          `json:"key,omitempty"`
	Message string          `json:"message"`
	Events  []history.Event `json:"events,omitempty"`
	// Incident numbers, from 1, the violations that one fault caused
	// (fenced-resource: a stale write and the updates it made look lost).
	Incident int `json:"incident,omitempty"`
}

// Result is one check's outcome.
type Result struct {
	Name       string      `json:"name"`
	Status     string      `json:"status"`
	Decides    bool        `json:"decides"`
	Note       string      `json:"note,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
	// Incidents counts the violations' incidents, where the check groups
	// them (fenced-resource).
	Incidents int `json:"incidents,omitempty"`
	// Linearizability only: keys checked, and the keys that failed.
	Keys       int      `json:"keys,omitempty"`
	FailedKeys []string `json:"failed_keys,omitempty"`
}

// Verdict is the whole decision.
type Verdict struct {
	// Valid is true only when every deciding check passed (jq '.valid ==
	// true'); Verdict says which of "valid", "invalid" or "unknown".
	Valid    bool     `json:"valid"`
	Verdict  string   `json:"verdict"`
	ExitCode int      `json:"exit_code"`
	Checks   []Result `json:"checks"`
	Stats    Stats    `json:"stats"`
	// Partial: the run was interrupted before its end, as bench's report
	// says of a bench; the checks ran on what it recorded. Notes say where
	// it stopped, and what the inputs lacked.
	Partial bool     `json:"partial,omitempty"`
	Notes   []string `json:"notes,omitempty"`

	// Kept for the reports; paired has, as the client saw them, the info
	// operations the committed log showed never happened, which ops drops.
	ops     []*Op
	paired  []*Op
	windows []Window
	lin     map[string]porcupine.LinearizationInfo
}

// Stats summarise the history.
type Stats struct {
	Events   int            `json:"events"`
	Ops      int            `json:"ops"`
	ByType   map[string]int `json:"by_type"`
	Grants   int            `json:"grants"`
	Nemesis  int            `json:"nemesis_windows"`
	Resolved int            `json:"info_resolved"` // info operations settled by the committed log
	// Filled by the chaos harness from the members' metrics (summed over
	// every member and every incarnation of it); zero for raftlock check.
	Restarts           int `json:"restarts"`
	Snapshots          int `json:"snapshots"`
	SnapshotsInstalled int `json:"snapshots_installed"`
	// The membership family's (chaos --nemesis membership): members
	// replaced, replacements whose newcomer installed a snapshot, and
	// snapshots members refused for lacking them.
	MembersReplaced    int `json:"members_replaced"`
	ReplacedBySnapshot int `json:"replaced_by_snapshot"`
	SnapshotsRefused   int `json:"snapshots_refused"`
	// Snapshots received whose data does not decode, summed likewise (the
	// snapshot-integrity check's evidence).
	SnapshotsCorrupt int `json:"snapshots_corrupt"`
	// The power families' (chaos --nemesis power,power-all): members'
	// disks cut, and the unsynced bytes the cuts dropped. Absent from a
	// run without them.
	PowerCuts         int   `json:"power_cuts,omitempty"`
	PowerBytesDropped int64 `json:"power_bytes_dropped,omitempty"`
	// The corrupt family's (chaos --nemesis corrupt): members' data files
	// damaged, and how each damaged member came back: it refused its data
	// (and was replaced), recovered (dropped a torn log tail), started
	// noticing nothing, or crashed. Absent from a run without it.
	Corruptions      int `json:"corruptions,omitempty"`
	CorruptRefused   int `json:"corrupt_refused,omitempty"`
	CorruptRecovered int `json:"corrupt_recovered,omitempty"`
	CorruptStarted   int `json:"corrupt_started,omitempty"`
	CorruptCrashed   int `json:"corrupt_crashed,omitempty"`
	// The table filled before the workload (chaos --held): locks taken,
	// their keys' size, and how long the fill took.
	HeldLocks       int     `json:"held_locks"`
	HeldKeySize     int     `json:"held_key_size,omitempty"`
	HeldFillSeconds float64 `json:"held_fill_seconds,omitempty"`
	CheckTime       float64 `json:"check_seconds"`
}

// Check runs every check on events.
func Check(events []history.Event, opts Options) *Verdict {
	start := time.Now()
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	ops, windows := Pair(events)
	stats := Stats{Events: len(events), Ops: len(ops), ByType: map[string]int{}, Nemesis: len(windows)}
	for _, o := range ops {
		stats.ByType[o.Type]++
		if o.F == history.OpAcquire && o.Type == history.OK {
			stats.Grants++
		}
	}
	rs := opts.Resolutions
	if opts.Log != nil {
		rs = append(append([]Resolution(nil), rs...), Resolve(events, *opts.Log)...)
	}
	paired := ops
	ops, stats.Resolved = resolve(ops, rs)
	ops = withListReads(ops)
	v := &Verdict{ops: ops, paired: paired, windows: windows, Stats: stats, Notes: opts.Notes}
	if stats.Ops == 0 {
		// Nothing was checked: that is no evidence of correctness.
		v.Valid, v.Verdict, v.ExitCode = false, VerdictUnknown, ExitUnknown
		v.Checks = []Result{{Name: "history", Status: StatusUnknown, Decides: true, Note: "no client operations to check"}}
		v.Stats.CheckTime = time.Since(start).Seconds()
		return v
	}
	ev := gatherEvidence(ops)
	boundResolved(ops, ev)
	lin, info := checkLinearizable(ops, opts.Timeout)
	v.lin = info
	v.Checks = []Result{lin, checkFencing(ops), checkLeaseTiming(ops, ev, newClockModel(events), opts),
		checkResource(ops), checkConvergence(opts.Digests), checkCrashes(opts.Crashes),
		checkNewcomers(opts.Newcomers), checkSnapshotIntegrity(opts.SnapshotIntegrity),
		checkAudit(ops, opts.Log), checkBackups(ops, opts.Backups), checkStorageLoss(opts.StorageLoss)}
	for i := range v.Checks {
		if v.Checks[i].Status == StatusSkipped {
			v.Checks[i].Decides = false // nothing was checked, so nothing is decided
		}
	}
	v.Valid, v.Verdict, v.ExitCode = true, VerdictValid, ExitValid
	for _, r := range v.Checks {
		if !r.Decides {
			continue
		}
		switch r.Status {
		case StatusViolation:
			v.Valid, v.Verdict, v.ExitCode = false, VerdictInvalid, ExitViolation
		case StatusUnknown:
			if v.ExitCode == ExitValid {
				v.Valid, v.Verdict, v.ExitCode = false, VerdictUnknown, ExitUnknown
			}
		}
	}
	v.Stats.CheckTime = time.Since(start).Seconds()
	return v
}

// Interrupted marks v as the verdict of a run Ctrl-C cut short (where
// says when): partial, and unless a deciding check found a violation,
// which stands whatever stopped the run, neither valid nor failing:
// VerdictInterrupted, ExitInterrupted. An operation the interruption cut
// short was recorded without its completion, so the checks took it as
// info, which may or may not have happened.
func (v *Verdict) Interrupted(where string) {
	v.Partial = true
	v.Notes = append(v.Notes, "interrupted "+where+"; operations it cut short are info")
	if v.ExitCode != ExitViolation {
		v.Valid, v.Verdict, v.ExitCode = false, VerdictInterrupted, ExitInterrupted
	}
}

// resolve applies post-run resolutions: an info acquire that happened
// carries its token (its return time stays unknown); one that did not is
// removed, as if never invoked.
func resolve(ops []*Op, rs []Resolution) ([]*Op, int) {
	if len(rs) == 0 {
		return ops, 0
	}
	byIndex := map[int64]Resolution{}
	for _, r := range rs {
		byIndex[r.Index] = r
	}
	out := ops[:0:0]
	n := 0
	for _, o := range ops {
		r, ok := byIndex[o.Invoke.Index]
		if !ok || o.Type != history.Info || (r.F == "" && o.F != history.OpAcquire) || (r.F != "" && r.F != o.F) {
			out = append(out, o)
			continue
		}
		n++
		switch {
		case !r.Happened:
			// Never applied: it leaves the history.
		case o.F == history.OpAcquire && r.Token != 0:
			o.Resolved = history.Ptr(r.Token)
			out = append(out, o)
		case o.F != history.OpAcquire:
			o.Applied = true
			out = append(out, o)
		}
	}
	return out, n
}

// isGrant: an acquire known to have happened (ok, or info resolved).
func isGrant(o *Op) bool {
	return o.F == history.OpAcquire && (o.Type == history.OK || o.Resolved != nil)
}

func isLockOp(o *Op) bool {
	switch o.F {
	case history.OpAcquire, history.OpRelease, history.OpRenew, history.OpGet:
		return true
	}
	return false
}

// checkLinearizable checks each key's lock operations on its own, in
// parallel, within one shared time budget.
func checkLinearizable(ops []*Op, timeout time.Duration) (Result, map[string]porcupine.LinearizationInfo) {
	res := Result{Name: "linearizability", Decides: true, Status: StatusOK}
	keys := byKey(ops, isLockOp)
	res.Keys = len(keys)
	model := lockModel()
	infos := map[string]porcupine.LinearizationInfo{}
	var mu sync.Mutex
	unknown := false
	deadline := time.Now().Add(timeout)
	g, _ := errgroup.WithContext(context.Background())
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, key := range sortedKeys(keys) {
		kops := keys[key]
		g.Go(func() error {
			pops := make([]porcupine.Operation, len(kops))
			for i, o := range kops {
				pops[i] = porcupine.Operation{ClientId: int(o.Process), Input: opInput(o), Output: opOutput(o),
					Call: o.Call(), Return: o.Return(), Metadata: o.Invoke.Index}
			}
			left := time.Until(deadline)
			if left <= 0 {
				left = time.Millisecond
			}
			r, info := porcupine.CheckOperationsVerbose(model, pops, left)
			mu.Lock()
			defer mu.Unlock()
			infos[key] = info
			switch r {
			case porcupine.Illegal:
				res.FailedKeys = append(res.FailedKeys, key)
				res.Violations = append(res.Violations, nonLinearizable(key, kops, info))
			case porcupine.Unknown:
				unknown = true
			}
			return nil
		})
	}
	g.Wait()
	sort.Strings(res.FailedKeys)
	sort.Slice(res.Violations, func(i, j int) bool { return res.Violations[i].Key < res.Violations[j].Key })
	switch {
	case len(res.FailedKeys) > 0:
		res.Status = StatusViolation
	case unknown:
		res.Status = StatusUnknown
		res.Note = fmt.Sprintf("checker timed out after %v", timeout)
	}
	return res, infos
}

// nonLinearizable names where the search for a linearization of key's
// operations failed: the longest order it found, the last operation it
// placed, and the operation it could not place next (of those left, the
// first to return: every order must place it before anything called after
// its return). The events are those two operations'.
func nonLinearizable(key string, kops []*Op, info porcupine.LinearizationInfo) Violation {
	v := Violation{Key: key}
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	placed := make([]bool, len(kops))
	for _, id := range longest {
		if id >= 0 && id < len(kops) {
			placed[id] = true
		}
	}
	var stuck *Op
	for i, o := range kops {
		if !placed[i] && (stuck == nil || o.Return() < stuck.Return()) {
			stuck = o
		}
	}
	where := ""
	if n := len(longest); n > 0 && longest[n-1] < len(kops) {
		last := kops[longest[n-1]]
		where = fmt.Sprintf("; the longest order found places %d, the last %s", n, describe(last))
		v.Events = append(v.Events, last.events()...)
	}
	if stuck != nil {
		where += fmt.Sprintf(", and cannot place %s after it", describe(stuck))
		v.Events = append(v.Events, stuck.events()...)
	}
	v.Message = fmt.Sprintf("key %q: no linearization of its %d operations exists%s (see lin-%s.html)", key, len(kops), where, fileSafe(key))
	return v
}

// checkFencing: the state machine never had to reject a grant; every
// granted token is unique and belongs to one key, whichever operation saw it
// (a grant, a get, a release or renewal with it); and tokens grow in real
// time over all keys (rule 1): an operation that saw a token returned before
// a grant was invoked means that grant's token is higher.
func checkFencing(ops []*Op) Result {
	res := Result{Name: "fencing", Decides: true, Status: StatusOK}
	granted := map[uint64]*Op{}
	keyOf := map[uint64]*Op{}
	var seen []sighting
	for _, o := range ops {
		if o.F == history.OpAcquire && o.Type == history.Fail && o.Error() == "grant-rejected" {
			res.Violations = append(res.Violations, Violation{Key: o.Key,
				Message: "the state machine rejected a grant: the leader proposed a Grant for a held key",
				Events:  []history.Event{o.Invoke, *o.Done}})
		}
		if isGrant(o) {
			t := o.Token()
			if t == 0 {
				res.Violations = append(res.Violations, Violation{Key: o.Key, Message: "grant without a token",
					Events: o.events()})
				continue
			}
			if prev, ok := granted[t]; ok {
				res.Violations = append(res.Violations, Violation{Key: o.Key,
					Message: fmt.Sprintf("token %d granted twice (keys %q and %q)", t, prev.Key, o.Key),
					Events:  append(prev.events(), o.events()...)})
			}
			granted[t] = o
			if o.Return() != maxTime {
				seen = append(seen, sighting{token: t, at: o.Return(), op: o})
			}
		}
		t, ok := sightingOf(o)
		if !ok && o.Resolved != nil {
			t, ok = *o.Resolved, true
		}
		if !ok || t == 0 {
			continue
		}
		if o.F != history.OpAcquire {
			seen = append(seen, sighting{token: t, at: o.Return(), op: o})
		}
		if prev, ok := keyOf[t]; !ok {
			keyOf[t] = o
		} else if prev.Key != o.Key {
			res.Violations = append(res.Violations, Violation{Key: o.Key,
				Message: fmt.Sprintf("token %d seen on two keys: %s, and %s", t, describe(prev), describe(o)),
				Events:  concatEvents(prev, o)})
		}
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i].at < seen[j].at })
	grants := make([]*Op, 0, len(granted))
	for _, o := range ops {
		if isGrant(o) && o.Token() != 0 {
			grants = append(grants, o)
		}
	}
	sort.SliceStable(grants, func(i, j int) bool { return grants[i].Call() < grants[j].Call() })
	var best *sighting // highest token seen before the current grant's call
	i := 0
	for _, g := range grants {
		for ; i < len(seen) && seen[i].at < g.Call(); i++ {
			if best == nil || seen[i].token > best.token {
				best = &seen[i]
			}
		}
		if best != nil && best.token >= g.Token() && best.op != g {
			res.Violations = append(res.Violations, Violation{Key: g.Key,
				Message: fmt.Sprintf("token %d was granted on %q after token %d had been seen: %s", g.Token(), g.Key, best.token, describe(best.op)),
				Events:  concatEvents(best.op, g)})
		}
	}
	if len(res.Violations) > 0 {
		res.Status = StatusViolation
	}
	return res
}

func leaseOf(o *Op) int64 {
	if o.Invoke.Value.LeaseMS != nil {
		return *o.Invoke.Value.LeaseMS
	}
	return 0
}

// checkResource: the fenced store never accepted a token below one it had
// accepted, and each accepted write incremented the counter it read, so no
// update was lost. Store operations are recorded in the order the store
// applied them.
func checkResource(ops []*Op) Result {
	res := Result{Name: "fenced-resource", Decides: true, Status: StatusOK}
	writes := byKey(ops, func(o *Op) bool { return (o.F == history.OpWrite || o.F == history.OpRead) && o.Type == history.OK })
	if len(writes) == 0 {
		res.Status, res.Note = StatusSkipped, "no fenced-resource operations in the history"
		return res
	}
	for _, key := range sortedKeys(writes) {
		var highest uint64
		var highestOp *Op
		var counter int64
		var lastWrite *Op
		// One stale write shows as several violations: its token, the
		// update it overwrote, and the honest holder's next write, which
		// finds the counter the stale one left. Violations at consecutive
		// operations of a key are one incident.
		inIncident := false
		flag := func(vi Violation) {
			if !inIncident {
				res.Incidents++
				inIncident = true
			}
			vi.Incident = res.Incidents
			res.Violations = append(res.Violations, vi)
		}
		for _, o := range writes[key] {
			before := len(res.Violations)
			t := o.Token()
			if t < highest {
				flag(Violation{Key: key,
					Message: fmt.Sprintf("%s with token %d accepted after token %d", o.F, t, highest),
					Events:  []history.Event{*highestOp.Done, *o.Done}})
			}
			if t >= highest {
				highest, highestOp = t, o
			}
			if o.F == history.OpWrite && o.Done.Value.Value != nil {
				v := *o.Done.Value.Value
				if v != counter+1 {
					vi := Violation{Key: key, Message: fmt.Sprintf("write of %d accepted when the counter was %d: an update was lost", v, counter)}
					if lastWrite != nil {
						vi.Events = append(vi.Events, *lastWrite.Done)
					}
					vi.Events = append(vi.Events, *o.Done)
					flag(vi)
				}
				counter, lastWrite = v, o
			}
			if o.F == history.OpWrite || len(res.Violations) > before {
				inIncident = len(res.Violations) > before // a clean read between them does not end one
			}
		}
	}
	if len(res.Violations) > 0 {
		res.Status = StatusViolation
		res.Note = fmt.Sprintf("%s in %s (a stale write and what it caused, at consecutive operations of a key, are one incident)",
			count(len(res.Violations), "violation"), count(res.Incidents, "incident"))
	}
	return res
}

// checkConvergence: members at the same applied index report the same
// digest, and all of them reached the same index.
func checkCrashes(crashes []string) Result {
	res := Result{Name: "member-crashes", Decides: true, Status: StatusOK,
		Note: "every member process ran until the harness killed it"}
	switch {
	case crashes == nil:
		res.Status, res.Note = StatusSkipped, "no process information (only the chaos harness has it)"
	case len(crashes) > 0:
		res.Status, res.Note = StatusViolation, "members exited without being killed, or lost entries they had acknowledged"
		for _, c := range crashes {
			res.Violations = append(res.Violations, Violation{Message: "member failed on its own: " + c})
		}
	}
	return res
}

// checkNewcomers: every member a membership change added caught up (its
// promotion was accepted) within the harness's bound, and no member was
// sent a snapshot whose configuration lacks it, which raft refuses (a
// newcomer sent a snapshot older than its addition waits for the next).
func checkNewcomers(n *Newcomers) Result {
	res := Result{Name: "newcomer-stuck", Decides: true, Status: StatusOK}
	switch {
	case n == nil:
		res.Status, res.Note = StatusSkipped, "no membership information (only the chaos harness has it)"
	case len(n.Problems) > 0:
		res.Status, res.Note = StatusViolation, "a new member did not catch up, or a member refused a snapshot lacking it"
		for _, p := range n.Problems {
			res.Violations = append(res.Violations, Violation{Message: p})
		}
	case n.Added == 0:
		res.Note = "no member was added; no member refused a snapshot"
	default:
		res.Note = fmt.Sprintf("%d new member(s) caught up in time; no member refused a snapshot", n.Added)
	}
	return res
}

// checkSnapshotIntegrity: no member received a snapshot whose data does
// not decode, beyond the ones the garbage nemesis forged at it. Members
// check a streamed snapshot's size and SHA-256 before raft sees it, so
// damaged data reaching the member's own decoding is a transfer bug (a
// stream cut short delivered as if whole, say), though the member then
// refuses it and no history can show it.
func checkSnapshotIntegrity(s *SnapshotIntegrity) Result {
	res := Result{Name: "snapshot-integrity", Decides: true, Status: StatusOK}
	if s == nil {
		res.Status, res.Note = StatusSkipped, "no snapshot metrics (only the chaos harness has them)"
		return res
	}
	ids := make([]int, 0, len(s.Corrupt))
	for id, n := range s.Corrupt {
		if n > 0 {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	var forgedOnly []string
	for _, id := range ids {
		n := s.Corrupt[id]
		switch {
		case s.Forged == nil:
			res.Violations = append(res.Violations, Violation{Message: fmt.Sprintf(
				"member %d received %d snapshot(s) whose data does not decode (raftlock_snapshots_corrupt_total) and no garbage nemesis forged any: a transfer delivered damaged data", id, n)})
		case n > s.Forged[id]:
			res.Violations = append(res.Violations, Violation{Message: fmt.Sprintf(
				"member %d received %d snapshot(s) whose data does not decode (raftlock_snapshots_corrupt_total), more than the %d the garbage nemesis forged at it: a transfer delivered damaged data", id, n, s.Forged[id])})
		default:
			forgedOnly = append(forgedOnly, fmt.Sprintf("member %d %d of %d", id, n, s.Forged[id]))
		}
	}
	switch {
	case len(res.Violations) > 0:
		res.Status, res.Note = StatusViolation, "a member received damaged snapshot data"
	case len(forgedOnly) > 0:
		res.Note = "members refused only undecodable snapshots the garbage nemesis forged (counted of forged): " + strings.Join(forgedOnly, ", ")
	default:
		res.Note = "no member received a snapshot whose data does not decode"
	}
	return res
}

func checkConvergence(ds []NodeDigest) Result {
	res := Result{Name: "convergence", Decides: true, Status: StatusOK}
	if len(ds) == 0 {
		res.Status, res.Note = StatusSkipped, "no node digests given"
		return res
	}
	at := map[uint64]NodeDigest{}
	var maxApplied uint64
	for _, d := range ds {
		maxApplied = max(maxApplied, d.Applied)
		if prev, ok := at[d.Applied]; ok && prev.Digest != d.Digest {
			res.Violations = append(res.Violations, Violation{Message: fmt.Sprintf(
				"nodes %d and %d disagree at applied index %d: digest %s vs %s", prev.Node, d.Node, d.Applied, prev.Digest, d.Digest)})
		}
		at[d.Applied] = d
	}
	var behind []int
	for _, d := range ds {
		if d.Applied != maxApplied {
			behind = append(behind, d.Node)
		}
	}
	if len(behind) > 0 {
		res.Note = fmt.Sprintf("nodes %v had not reached applied index %d when digests were taken", behind, maxApplied)
		if len(res.Violations) == 0 {
			res.Status = StatusUnknown
			res.Decides = false
		}
	}
	if len(res.Violations) > 0 {
		res.Status = StatusViolation
	}
	return res
}

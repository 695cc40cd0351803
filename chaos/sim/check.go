package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
)

// The simulator's own checks. SafetyCheck: no two members applied
// different (term, commands) at one log index. IntegrityCheck names the
// checker's snapshot-integrity check, which the simulator feeds the
// members' counts of snapshot data that did not decode: it forges no
// frame, so such data came from a transfer that delivered what it should
// not (rule 10: a snapshot reaches raft only whole and checked).
const (
	SafetyCheck    = "state-machine-safety"
	IntegrityCheck = "snapshot-integrity"
)

// Check runs the checker on a run's history, with its crashes, digests and
// committed log, and adds the state machine safety check.
func Check(res *Result, timeout time.Duration) *checker.Verdict {
	crashes := res.Crashes
	if crashes == nil {
		crashes = []string{} // known: none
	}
	corrupt := res.SnapshotsCorrupt
	if corrupt == nil {
		corrupt = map[int]int{} // known: none
	}
	// The checker's snapshot-integrity check, with the counts the members
	// kept over their restarts; the simulator forges no frame (Forged nil).
	v := checker.Check(res.Events, checker.Options{Timeout: timeout, Crashes: crashes, Digests: res.Digests, Log: res.Log,
		SnapshotIntegrity: &checker.SnapshotIntegrity{Corrupt: corrupt}, Newcomers: res.Newcomers, Backups: res.Backups})
	safety := checker.Result{Name: SafetyCheck, Decides: true, Status: checker.StatusOK,
		Note: "every index of the committed log was applied alike by every member that applied it"}
	if len(res.Safety) > 0 {
		safety.Status, safety.Note = checker.StatusViolation, "members applied different entries at one index"
		for _, m := range res.Safety {
			safety.Violations = append(safety.Violations, checker.Violation{Message: m})
		}
		v.Valid, v.Verdict, v.ExitCode = false, checker.VerdictInvalid, checker.ExitViolation
	}
	v.Checks = append([]checker.Result{safety}, v.Checks...)
	v.Stats.Restarts, v.Stats.Snapshots, v.Stats.SnapshotsInstalled = res.Stats.Restarts, res.Stats.Snapshots, res.Stats.Installed
	v.Stats.MembersReplaced, v.Stats.ReplacedBySnapshot = res.Stats.MembersReplaced, res.Stats.ReplacedBySnapshot
	return v
}

// FailingCheck names the first deciding check that failed (a violation
// before an unknown), or "" when the verdict is valid.
func FailingCheck(v *checker.Verdict) string {
	for _, want := range []string{checker.StatusViolation, checker.StatusUnknown} {
		for _, r := range v.Checks {
			if r.Decides && r.Status == want {
				return r.Name
			}
		}
	}
	return ""
}

// WriteHistory writes the history as JSON Lines after its header line, as
// the chaos harness's history.Recorder does.
func WriteHistory(w io.Writer, res *Result) error {
	bw := bufio.NewWriter(w)
	b, err := json.Marshal(map[string]any{"header": res.Header})
	if err != nil {
		return err
	}
	bw.Write(append(b, '\n'))
	for _, e := range res.Events {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		bw.Write(append(b, '\n'))
	}
	return bw.Flush()
}

// WriteSummary writes summary.md: the run, its stats, the verdict and the
// command that replays it.
func WriteSummary(w io.Writer, cfg Config, res *Result, v *checker.Verdict, replay string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# raftlock sim: seed %d\n\n", cfg.Seed)
	check := FailingCheck(v)
	if check == "" {
		fmt.Fprintf(bw, "Verdict: **%s**\n\n", v.Verdict)
	} else {
		fmt.Fprintf(bw, "Verdict: **%s** (first failing check: `%s`)\n\n", v.Verdict, check)
	}
	fmt.Fprintf(bw, "Replay: `%s`\n\n", replay)
	faults := fault.Join(cfg.Faults)
	if faults == "" {
		faults = "none"
	}
	fmt.Fprintf(bw, "%d members, %v simulated, faults %s, bug %q, max ops %d, max faults %d (0: no bound)\n\n",
		cfg.Nodes, cfg.Duration, faults, cfg.Bug, cfg.MaxOps, cfg.MaxFaults)
	if cfg.Resource == workload.Unfenced {
		fmt.Fprintf(bw, "Resource: unfenced, a register that accepts every write whatever its token: a holder that stalled past its lease overwrites, and the fenced-resource check is expected to find it.\n\n")
	}
	if cfg.Held > 0 {
		fmt.Fprintf(bw, "%d locks held before the workload (keys of %d bytes, leases of %v): %d taken in %.3f s simulated\n\n",
			cfg.Held, cfg.KeySize, HeldLease, res.Stats.Held, res.Stats.FillSeconds)
	}
	st := res.Stats
	fmt.Fprintf(bw, "| stat | value |\n|---|---|\n")
	fmt.Fprintf(bw, "| simulated seconds | %.3f |\n| operations (ok/fail/info) | %d (%d/%d/%d) |\n", st.SimSeconds, st.Ops, st.OK, st.Fail, st.Info)
	fmt.Fprintf(bw, "| faults | %s |\n", faultString(st.Faults))
	fmt.Fprintf(bw, "| messages (dropped, duplicated) | %d (%d, %d) |\n", st.Messages, st.Dropped, st.Duplicated)
	fmt.Fprintf(bw, "| restarts | %d |\n| snapshots taken / installed | %d / %d |\n", st.Restarts, st.Snapshots, st.Installed)
	fmt.Fprintf(bw, "| snapshot streams (broken, delivered truncated) | %d (%d, %d) |\n", st.SnapTransfers, st.SnapTransfersBroken, st.SnapPartial)
	fmt.Fprintf(bw, "| unsynced writes lost | %d |\n| I/O errors / slow syncs | %d / %d |\n", st.LostWrites, st.IOErrors, st.SlowSyncs)
	if ms := st.MembershipStats; ms.MembersRemoved+ms.MembersAdded > 0 {
		fmt.Fprintf(bw, "| members removed / added / promoted (by snapshot) | %d / %d / %d (%d) |\n", ms.MembersRemoved, ms.MembersAdded, ms.MembersReplaced, ms.ReplacedBySnapshot)
		fmt.Fprintf(bw, "| removed leaders / leaders that applied their own removal / removed that stopped themselves | %d / %d / %d |\n", ms.LeadersRemoved, ms.LeaderSelfRemoved, ms.RemovedStopped)
		fmt.Fprintf(bw, "| joiners restarted before they applied their add / changes given up | %d / %d |\n", ms.JoinerRestarts, ms.MembershipFailed)
	}
	fmt.Fprintf(bw, "| commit index | %d |\n\n", st.CommitIndex)
	fmt.Fprintf(bw, "## Checks\n\n")
	v.Summary(bw)
	return bw.Flush()
}

// faultString lists fault counts by family, in Families order.
func faultString(m map[fault.Family]int) string {
	var parts []string
	for _, f := range Families {
		if m[f] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", f, m[f]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

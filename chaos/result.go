package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
)

// What a run gives the checker and writes beside the history: its result
// and the families' reports, gathered by the last phase, collect.

// Result is what a run recorded, for the checker.
type Result struct {
	Events  []history.Event
	Digests []checker.NodeDigest
	Log     *checker.CommittedLog // the committed log the post-run audit read; nil: none
	Stats   ClusterStats          // restarts and snapshots, summed over the members
	// Crashes are members that exited on their own (a panic, say): a
	// failure of raftlock that no history shows, reported beside the verdict.
	Crashes []Crash
	// Garbage is what the garbage families sent, with the members' log
	// lines that show it refused; nil when no garbage family ran.
	Garbage *GarbageReport
	// Membership is what the membership family did, and each problem
	// found (the newcomer-stuck check).
	Membership MembershipReport
	// Power is what the power families' cuts did (zero: none ran).
	Power PowerCounts
	// Corrupt is what the corrupt family damaged and how each member
	// came back (no faults: none ran).
	Corrupt CorruptReport
	// Held is the table filled before the workload (Locks 0: none).
	Held HeldFill
	// Integrity is the snapshot-integrity check's evidence.
	Integrity SnapshotIntegrity
	// Target is the service tried ("": raftlock): a peer has no
	// membership changes or snapshot counters to check.
	Target Target
	// Unrecovered says how a peer target failed to take writes again
	// after its power cuts were healed, for the verdict's notes; "": it
	// recovered.
	Unrecovered string
	// Interrupted says where Ctrl-C cut the run short ("during the
	// workload, after 4.2s of 1m0s"); "" when it ran to its end.
	Interrupted string
}

// SnapshotIntegrity is, per member, the snapshots it received whose data
// does not decode (raftlock_snapshots_corrupt_total summed over its
// processes, as the harness read them: every second, before each kill it
// makes of a running member and at the end, so a member paused and then
// killed may lose the counts of its last second), and the undecodable
// snapshots the garbage nemesis forged at it (nil: no garbage family ran).
type SnapshotIntegrity struct {
	Corrupt map[int]int `json:"corrupt"`
	Forged  map[int]int `json:"forged,omitempty"`
}

// snapshotIntegrity gathers the evidence from every member the run had.
func snapshotIntegrity(sup *Supervisor, nem *Nemesis, garbage bool) SnapshotIntegrity {
	si := SnapshotIntegrity{Corrupt: map[int]int{}}
	for _, id := range sup.AllIDs() {
		si.Corrupt[id] = int(sup.MemberStats(id).Corrupt)
	}
	if garbage {
		si.Forged = nem.Garbage.Undecodable()
		if si.Forged == nil {
			si.Forged = map[int]int{}
		}
	}
	return si
}

// MembershipReport is the membership family's account, written to
// membership.json when it ran: each member it added, the members removed,
// and the problems the newcomer-stuck check reports.
type MembershipReport struct {
	Replaced           int            `json:"members_replaced"`
	ReplacedBySnapshot int            `json:"replaced_by_snapshot"`
	RemovedStopped     int            `json:"removed_stopped_by_themselves"`
	Failed             int            `json:"membership_faults_failed"`
	Removed            []int          `json:"removed"`
	Newcomers          []Newcomer     `json:"newcomers"`
	Refused            map[int]uint64 `json:"snapshots_refused,omitempty"`
	Problems           []string       `json:"problems"`
}

// membershipReport gathers the membership family's counts and problems:
// a newcomer that did not catch up within NewcomerBound, and any member
// (of every member the run had) that refused a snapshot lacking it.
func membershipReport(sup *Supervisor, nem *Nemesis) MembershipReport {
	r := MembershipReport{Replaced: int(nem.Counts.Replaced.Load()), ReplacedBySnapshot: int(nem.Counts.ReplacedBySnapshot.Load()),
		RemovedStopped: int(nem.Counts.RemovedStopped.Load()), Failed: int(nem.Counts.MembershipFailed.Load()),
		Removed: sup.Retired(), Newcomers: nem.Newcomers(), Problems: []string{}}
	for _, nc := range r.Newcomers {
		if !nc.Promoted {
			r.Problems = append(r.Problems, fmt.Sprintf("member %d, added to replace member %d, did not catch up within %v (promotion refused for %.1fs: %s)",
				nc.Node, nc.Replaced, NewcomerBound, nc.Seconds, nc.Err))
		}
	}
	for _, id := range sup.AllIDs() {
		if n := sup.MemberStats(id).Refused; n > 0 {
			if r.Refused == nil {
				r.Refused = map[int]uint64{}
			}
			r.Refused[id] = n
			r.Problems = append(r.Problems, fmt.Sprintf("member %d refused %d snapshot(s) whose configuration lacked it (raftlock_snapshots_refused_total): a leader sent it a snapshot older than the change that added it", id, n))
		}
	}
	return r
}

// GarbageReport is the garbage families' counts, written to garbage.json.
type GarbageReport struct {
	Conns   int64          `json:"conns"`
	Refused int64          `json:"refused"`
	Bytes   int64          `json:"bytes"`
	Forged  int64          `json:"forged_raft_messages"`
	Client  int64          `json:"malformed_client_frames"`
	Answers int64          `json:"client_conns_answered"`
	Members map[string]int `json:"member_log_lines"`
}

// collect gathers the result, writing digests.json, garbage.json,
// membership.json and committed-log.json beside the history.
func (r *run) collect(ctx context.Context, digests []checker.NodeDigest) (*Result, error) {
	cfg, nem := r.cfg, r.nem
	if k := nem.Counts.PowerCutsFailed.Load(); k > 0 {
		// A cut that failed to remount left a member's data directory
		// empty under it: whatever the checks said would not be about
		// the disk the history describes.
		return nil, fmt.Errorf("%d power cuts failed (see the log): no verdict on disks the history does not describe", k)
	}
	cfg.Log.Info("nemesis", "counts", nem.Counts.String())
	if cfg.Progress != nil && (slices.Contains(cfg.Nemeses, fault.FamilySnapshot) || slices.Contains(cfg.Nemeses, fault.FamilyMembership) || nem.Counts.Double.Load() > 0 || cfg.usesPower()) {
		fmt.Fprintf(cfg.Progress, "chaos: nemesis: %s\n", nem.Counts.String())
	}
	garbage, err := r.garbageReport()
	if err != nil {
		return nil, err
	}
	if err := r.rec.Err(); err != nil {
		return nil, fmt.Errorf("write the history: %w", err)
	}
	if err := writeJSON(cfg.Out, "digests.json", digests, true); err != nil {
		return nil, err
	}
	res := &Result{Events: r.rec.Events(), Digests: digests,
		Stats: r.sup.Stats(), Crashes: r.sup.Crashes(), Garbage: garbage, Membership: membershipReport(r.sup, nem),
		Held: r.held, Integrity: snapshotIntegrity(r.sup, nem, garbage != nil),
		Power:   PowerCounts{Cuts: int(nem.Counts.PowerCuts.Load()), BytesDropped: nem.Counts.PowerBytesDropped.Load()},
		Corrupt: nem.Corrupt.Report()}
	if !lossInjected(cfg.Nemeses) {
		// A member that lost what it acknowledged keeps running, refusing
		// its leader's heartbeats: member-crashes reports it, as the
		// simulator does.
		res.Crashes = append(res.Crashes, LostAcknowledged(r.logs)...)
	}
	if slices.Contains(cfg.Nemeses, fault.FamilyCorrupt) {
		if err := r.writeCorrupt(res.Corrupt); err != nil {
			return nil, err
		}
	}
	if slices.Contains(cfg.Nemeses, fault.FamilyMembership) {
		if err := writeJSON(cfg.Out, "membership.json", res.Membership, true); err != nil {
			return nil, err
		}
		if cfg.Progress != nil {
			m := res.Membership
			fmt.Fprintf(cfg.Progress, "chaos: membership: %d members replaced (%d by snapshot), removed %v, %d failed, problems %d\n",
				m.Replaced, m.ReplacedBySnapshot, m.Removed, m.Failed, len(m.Problems))
		}
	}
	converged := len(digests) == len(r.sup.IDs())
	for _, d := range digests {
		converged = converged && d.Applied == digests[0].Applied && d.Digest == digests[0].Digest
	}
	log, id, err := r.sup.bestAuditLog(ctx)
	if err != nil {
		cfg.Log.Warn("post-run audit skipped", "err", err)
		return res, nil
	}
	if !log.Complete {
		cfg.Log.Warn("no member's audit log is complete: absent acquires stay unknown", "node", id, "commands", len(log.Commands))
	}
	res.Log = &checker.CommittedLog{Final: log.Complete && converged, Commands: log.Commands}
	if err := writeJSON(cfg.Out, "committed-log.json", res.Log, false); err != nil {
		return nil, err
	}
	return res, nil
}

// garbageReport is what the garbage families sent (nil when none ran),
// written to garbage.json.
func (r *run) garbageReport() (*GarbageReport, error) {
	if !slices.Contains(r.cfg.Nemeses, fault.FamilyGarbage) && !slices.Contains(r.cfg.Nemeses, fault.FamilyGarbageHeartbeat) {
		return nil, nil
	}
	g := &r.nem.Garbage
	garbage := &GarbageReport{Conns: g.Conns.Load(), Refused: g.Refused.Load(), Bytes: g.Bytes.Load(), Forged: g.Forged.Load(),
		Client: g.Client.Load(), Answers: g.Answers.Load(), Members: MemberLogCounts(r.logs)}
	r.cfg.Log.Info("garbage", "counts", g.String())
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "chaos: garbage: %s; member log lines %v\n", g.String(), garbage.Members)
	}
	return garbage, writeJSON(r.cfg.Out, "garbage.json", garbage, true)
}

// writeJSON writes v as dir/name, indented or on one line.
func writeJSON(dir, name string, v any, indent bool) error {
	var b []byte
	var err error
	if indent {
		b, err = json.MarshalIndent(v, "", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

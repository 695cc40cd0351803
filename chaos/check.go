package chaos

import (
	"time"

	"github.com/raftlock/raftlock/checker"
)

// Check runs the checker on a run's history, with what the harness found
// beside it: the members' crashes and digests, the committed log, the
// newcomers' problems and the snapshot integrity counts; the verdict's
// stats carry the run's restarts, snapshots, membership changes and held
// table. timeout bounds the linearizability search (0: the checker's
// default). A run cut short is checked on what it recorded, and its
// verdict says so (checker.Verdict.Interrupted). sim.Check is its twin
// for the simulator.
func Check(res *Result, timeout time.Duration) *checker.Verdict {
	opts := checker.Options{Timeout: timeout, Crashes: []string{}, Digests: res.Digests, Log: res.Log,
		Newcomers:         &checker.Newcomers{Added: len(res.Membership.Newcomers), Problems: res.Membership.Problems},
		SnapshotIntegrity: &checker.SnapshotIntegrity{Corrupt: res.Integrity.Corrupt, Forged: res.Integrity.Forged},
		StorageLoss:       res.Corrupt.storageLoss()}
	if res.Target != "" && res.Target != TargetRaftlock {
		// A peer has no membership changes or snapshot counters the
		// harness reads: those checks are skipped, not passed.
		opts.Newcomers, opts.SnapshotIntegrity = nil, nil
	}
	for _, c := range res.Crashes {
		opts.Crashes = append(opts.Crashes, c.String())
	}
	v := checker.Check(res.Events, opts)
	v.Stats.Restarts, v.Stats.Snapshots, v.Stats.SnapshotsInstalled = res.Stats.Restarts, res.Stats.Snapshots, res.Stats.SnapshotsInstalled
	v.Stats.MembersReplaced, v.Stats.ReplacedBySnapshot = res.Membership.Replaced, res.Membership.ReplacedBySnapshot
	v.Stats.SnapshotsRefused, v.Stats.SnapshotsCorrupt = res.Stats.SnapshotsRefused, res.Stats.SnapshotsCorrupt
	v.Stats.PowerCuts, v.Stats.PowerBytesDropped = res.Power.Cuts, res.Power.BytesDropped
	c := res.Corrupt
	v.Stats.Corruptions, v.Stats.CorruptRefused, v.Stats.CorruptRecovered = len(c.Faults), c.Refused, c.Recovered
	v.Stats.CorruptStarted, v.Stats.CorruptCrashed = c.Started, c.Crashed
	v.Stats.HeldLocks = res.Held.Locks
	if res.Held.Locks > 0 {
		v.Stats.HeldKeySize, v.Stats.HeldFillSeconds = res.Held.KeySize, res.Held.Seconds
	}
	if res.Unrecovered != "" {
		v.Notes = append(v.Notes, res.Unrecovered)
	}
	if res.Interrupted != "" {
		v.Interrupted(res.Interrupted)
	}
	return v
}

package member

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/fsm"
)

// hooks are the points where a planted bug replaces correct behaviour. They
// are chosen once, in New, from Config.Bug, so decision code follows the
// rule a hook names and never tests which bug is planted. The defaults are
// the rules of the lock service.
type hooks struct {
	// expireAt is when the leader proposes the Expire of l (rule 6).
	expireAt func(l lease) time.Duration
	// hardStateToSave is the hard state a Ready persists (rule 8).
	hardStateToSave func(rd *raft.Ready) *raftpb.HardState
	// mustSync says whether a Ready's write must be synced before its
	// messages go out and its entries count as stable (rule 8).
	mustSync func(rd *raft.Ready) bool
	// atReady runs when a Ready is taken, before the driver has persisted
	// it: nothing, since committed entries apply in Advance (rule 8).
	atReady func(c *Core, now time.Duration, rd *raft.Ready)
	// termBarrier: a new leader decides nothing before the first entry of
	// its term applies (rule 3).
	termBarrier bool
	// linearizableReads: a non-stale read confirms leadership with a
	// quorum first (rule 9).
	linearizableReads bool
	// backupReadIndex: a backup confirms leadership with a quorum and
	// waits for the apply to reach the read index before it copies the
	// table (rule 9).
	backupReadIndex bool
	// releaseChecksHolder: a release is proposed only for the holder's
	// token (rule 5).
	releaseChecksHolder bool
	// orderHandoff orders a handoff's entry, whose Release or Expire and
	// Grant are the last two proposals: the freeing command first (rule 4).
	orderHandoff func(ps []Proposal)
	// holderWaitsForHandoff: a holder's release, renewal or forced
	// release that meets a handoff in flight on its key is decided once
	// the handoff applied (rule 4).
	holderWaitsForHandoff bool
	// otherTermsSpareGhosts: an orphaned Grant that applies before this
	// member's term barrier, with an entry of another leadership after
	// it, is left to its lease, not released as a ghost (rule 7).
	otherTermsSpareGhosts bool
	// forceChecksHolder: a forced release reads the holder's token from a
	// confirmed table and is proposed only while that token holds the key
	// (rule 12).
	forceChecksHolder bool
	// proposedToken is a token a leader stamps on a Grant it proposes
	// (in its tag); 0: none, the state machine assigns it at apply (rule 1).
	proposedToken func(lastToken uint64, inflight int) uint64
	// appliedToken is the token a Grant that applied is answered with.
	appliedToken func(env fsm.Envelope, res fsm.Result) uint64
	// answerAtPropose is an answer given when a command is proposed,
	// before it commits; false: none (rule 8).
	answerAtPropose func(cmd fsm.Command, lastToken uint64) (fsm.Result, bool)
	// dueLeases is what a member does itself, in Tick, about the leases
	// its clock says ran out: nothing, since a lock goes only by a
	// committed Expire (rule 6).
	dueLeases func(lm *LockManager, now time.Duration)
	// expireCommand is what the leader proposes when a lease runs out.
	expireCommand func(key string, token uint64) fsm.Command
	// snapshotOnAdd: every member snapshots when a member is added, so a
	// learner that needs a snapshot gets one naming it (raft refuses one
	// whose configuration lacks the receiver).
	snapshotOnAdd bool
	// peerInputChecks: Step refuses what raft would take from a peer and
	// then panic on or store unusable: an append whose entries do not
	// follow its (index, term), a snapshot whose configuration raft cannot
	// restore (a joint one included) or whose data does not decode.
	peerInputChecks bool
}

// Planted bugs, for proving the harnesses catch them (Config.Bug). Never set
// in production: the CLI accepts one only with fault injection enabled.
const (
	BugExpireIgnoresToken  = "expire-ignores-token"
	BugReleaseSkipsOwner   = "release-skips-owner-check"
	BugNoTermBarrier       = "no-term-barrier"
	BugTokenAtPropose      = "token-at-propose"
	BugAckBeforeCommit     = "ack-before-commit"
	BugFollowerLocalExpire = "follower-local-expire"
	BugStaleRead           = "stale-read"
	BugEarlyExpire         = "early-expire"
	BugCommitNotPersisted  = "commit-not-persisted"
	BugSnapshotUnsynced    = "snapshot-unsynced"
	BugSkipFsync           = "skip-fsync"
	BugApplyBeforePersist  = "apply-before-persist"
	BugNoSnapshotOnAdd     = "no-snapshot-on-add"
	BugNoPeerInputChecks   = "no-peer-input-checks"
	// BugBackupWithoutReadIndex: a real bug, fixed. A backup copies the
	// leader's table once its term barrier passed, with no quorum read.
	BugBackupWithoutReadIndex = "backup-without-read-index"
	// BugSnapshotPartial is planted in the peer transport, not here
	// (peer.Config.UnsafeSkipSnapshotChecks): a received snapshot is
	// delivered unchecked, even one whose stream broke before its last
	// chunk.
	BugSnapshotPartial = "snapshot-partial"
	// BugForceReleaseUnchecked: a forced release is proposed at once,
	// whatever the table holds, as a Release of whoever holds the key when
	// it applies.
	BugForceReleaseUnchecked = "force-release-unchecked"
	// BugHandoffGrantFirst: a handoff's Grant is placed before the Release
	// or Expire that frees its key, in their shared entry.
	BugHandoffGrantFirst = "handoff-grant-first"
	// BugHolderCallDuringHandoff: a real bug, fixed. A holder's release,
	// renewal or forced release that meets a handoff in flight (its lease
	// ran out with waiters) is decided on the table before the handoff
	// applied: "not the holder" while a get still shows it holding.
	BugHolderCallDuringHandoff = "holder-call-during-handoff"
	// BugGhostAfterAnotherLeader: a real bug, fixed. A member that leads
	// again releases its own orphaned Grant as a ghost although another
	// leader committed it in between, and may have shown it held.
	BugGhostAfterAnotherLeader = "ghost-after-another-leader"
	// BugDamagedLogTrusted is planted in the log store, not here
	// (logstore.Options.UnsafeTrustDamagedLog): a write-ahead log whose
	// checksum fails in its middle is cut there as if its tail were torn,
	// and the clean-stop seal is ignored, so a member whose disk was
	// damaged starts over a shorter log and an older vote.
	BugDamagedLogTrusted = "damaged-log-trusted"
)

// Bugs lists the planted bugs by name (a new slice each call).
func Bugs() []string { return slices.Clone(bugs) }

var bugs = []string{BugExpireIgnoresToken, BugReleaseSkipsOwner, BugNoTermBarrier,
	BugTokenAtPropose, BugAckBeforeCommit, BugFollowerLocalExpire, BugStaleRead, BugEarlyExpire,
	BugCommitNotPersisted, BugSnapshotUnsynced, BugSkipFsync, BugApplyBeforePersist, BugNoSnapshotOnAdd,
	BugNoPeerInputChecks, BugSnapshotPartial, BugForceReleaseUnchecked, BugHandoffGrantFirst, BugBackupWithoutReadIndex,
	BugHolderCallDuringHandoff, BugGhostAfterAnotherLeader, BugDamagedLogTrusted}

// ValidBug says whether name is a planted bug ("" is none).
func ValidBug(name string) bool {
	if name == "" {
		return true
	}
	return slices.Contains(bugs, name)
}

func plantHooks(bug string) hooks {
	h := hooks{
		expireAt:        func(l lease) time.Duration { return l.deadline },
		atReady:         func(*Core, time.Duration, *raft.Ready) {},
		dueLeases:       func(*LockManager, time.Duration) {},
		hardStateToSave: func(rd *raft.Ready) *raftpb.HardState { return rd.HardState },
		// A snapshot is always synced although raft's MustSync ignores it:
		// the follower acknowledges it, and one that lost it in a crash
		// would be asked to commit entries it no longer has.
		mustSync:              func(rd *raft.Ready) bool { return rd.MustSync || !raft.IsEmptySnap(rd.Snapshot) },
		termBarrier:           true,
		snapshotOnAdd:         true,
		peerInputChecks:       true,
		linearizableReads:     true,
		backupReadIndex:       true,
		releaseChecksHolder:   true,
		forceChecksHolder:     true,
		holderWaitsForHandoff: true,
		otherTermsSpareGhosts: true,
		orderHandoff:          func([]Proposal) {},
		proposedToken:         func(uint64, int) uint64 { return 0 },
		appliedToken:          func(_ fsm.Envelope, res fsm.Result) uint64 { return res.Token },
		answerAtPropose:       func(fsm.Command, uint64) (fsm.Result, bool) { return fsm.Result{}, false },
		expireCommand: func(key string, token uint64) fsm.Command {
			return fsm.Command{Op: fsm.OpExpire, Key: key, Token: token}
		},
	}
	if !plantPersistenceBug(&h, bug) {
		plantDecisionBug(&h, bug)
	}
	return h
}

// plantPersistenceBug plants bug in h if it is one of what a Ready stores
// and when (rule 8); false if it is not.
func plantPersistenceBug(h *hooks, bug string) bool {
	switch bug {
	case BugCommitNotPersisted:
		// A real bug, fixed: a hard state that only moves the commit index
		// is not written, while compaction stores snapshots past the
		// stored commit; the member then cannot restart.
		h.hardStateToSave = func(rd *raft.Ready) *raftpb.HardState {
			if rd.MustSync {
				return rd.HardState
			}
			return nil
		}
	case BugSnapshotUnsynced:
		// A real bug, fixed: a received snapshot is written unsynced (raft's
		// MustSync ignores snapshots) and then acknowledged.
		h.mustSync = func(rd *raft.Ready) bool { return rd.MustSync }
	case BugSkipFsync:
		// Nothing is ever synced: entries and votes are acknowledged while
		// still in the page cache.
		h.mustSync = func(*raft.Ready) bool { return false }
	case BugApplyBeforePersist:
		h.atReady = applyAtReady
	default:
		return false
	}
	return true
}

// plantDecisionBug plants bug, one of the leader's decisions, the peer
// input checks or membership, in h.
func plantDecisionBug(h *hooks, bug string) {
	switch bug {
	case BugEarlyExpire:
		// The leader expires a lock at half its lease.
		h.expireAt = func(l lease) time.Duration { return l.deadline - l.length/2 }
	case BugNoSnapshotOnAdd:
		// A real bug, fixed: adding a member does not snapshot, so a
		// learner that needs a snapshot is sent the last one, which
		// predates it; raft refuses it and the learner waits until the
		// next scheduled snapshot, forever on an idle cluster.
		h.snapshotOnAdd = false
	case BugNoPeerInputChecks:
		// A real bug, fixed: Step hands raft a peer's append or snapshot
		// as it comes. Without TLS a forged hello may claim any member,
		// and one frame makes raft panic ("entry 1 conflict with committed
		// entry", "unable to restore config") or leaves a stored snapshot
		// the member cannot apply, at this start and every later one.
		h.peerInputChecks = false
	case BugNoTermBarrier:
		h.termBarrier = false
	case BugStaleRead:
		h.linearizableReads = false
	case BugBackupWithoutReadIndex:
		// A deposed leader that has not heard of its successor copies its
		// table, which lacks what the successor acknowledged.
		h.backupReadIndex = false
	case BugReleaseSkipsOwner:
		h.releaseChecksHolder = false
	case BugForceReleaseUnchecked:
		h.forceChecksHolder = false
	case BugHolderCallDuringHandoff:
		h.holderWaitsForHandoff = false
	case BugGhostAfterAnotherLeader:
		h.otherTermsSpareGhosts = false
	case BugHandoffGrantFirst:
		h.orderHandoff = func(ps []Proposal) {
			n := len(ps)
			ps[n-2], ps[n-1] = ps[n-1], ps[n-2]
			ps[n-2].WithNext, ps[n-1].WithNext = true, false
		}
	case BugTokenAtPropose:
		// The leader picks the token when it proposes, and the proposed
		// token wins over the state machine's counter at apply.
		h.proposedToken = func(last uint64, inflight int) uint64 { return last + 1 + uint64(inflight) }
		h.appliedToken = func(env fsm.Envelope, res fsm.Result) uint64 {
			if env.Tag != 0 {
				return env.Tag
			}
			return res.Token
		}
	case BugAckBeforeCommit:
		// The leader answers as soon as it proposes.
		h.answerAtPropose = func(cmd fsm.Command, last uint64) (fsm.Result, bool) {
			switch cmd.Op {
			case fsm.OpRelease:
				return fsm.Result{Status: fsm.Released}, true
			case fsm.OpRenew:
				return fsm.Result{Status: fsm.Renewed, Token: cmd.Token}, true
			}
			return fsm.Result{Status: fsm.Granted, Token: last + 1}, true
		}
	case BugFollowerLocalExpire:
		h.dueLeases = dropDueLocks
	case BugExpireIgnoresToken:
		// An expiry removes whatever holds the key.
		h.expireCommand = func(key string, _ uint64) fsm.Command { return fsm.Command{Op: fsm.OpRelease, Key: key} }
	}
}

// applyAtReady is BugApplyBeforePersist: the committed entries of a Ready
// apply, and their callers are answered, as the Ready is taken, before the
// driver has written it.
func applyAtReady(c *Core, now time.Duration, rd *raft.Ready) {
	c.appliedR = true
	if err := c.apply(now, rd); err != nil {
		c.log.Error("apply failed", "err", err)
	}
	c.collect(now)
}

// dropDueLocks is BugFollowerLocalExpire: every member drops a lock when
// its own clock says the lease ran out, and a leader grants it to the next
// waiter at once, as it would after an applied Expire.
func dropDueLocks(lm *LockManager, now time.Duration) {
	for l, ok := lm.leases.due(now); ok && l.deadline <= now; l, ok = lm.leases.due(now) {
		key := lm.leases.key(l)
		lm.machine.Apply(fsm.Command{Op: fsm.OpExpire, Key: key, Token: l.token})
		lm.leases.remove(l.lock)
		lm.pump(key)
	}
}

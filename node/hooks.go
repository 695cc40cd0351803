package node

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// hooks are the points where a planted bug replaces correct behaviour. They
// are chosen once, in New, from Config.Bug, so decision code calls a hook
// instead of testing which bug is planted.
type hooks struct {
	// expireAt is when the leader proposes the Expire of l.
	expireAt func(l lease) time.Duration
	// hardStateToSave is the hard state a Ready persists.
	hardStateToSave func(rd *raft.Ready) *raftpb.HardState
}

func plantHooks(bug string) hooks {
	h := hooks{
		expireAt:        func(l lease) time.Duration { return l.deadline },
		hardStateToSave: func(rd *raft.Ready) *raftpb.HardState { return rd.HardState },
	}
	switch bug {
	case BugEarlyExpire:
		// Planted bug: the leader expires a lock at half its lease.
		h.expireAt = func(l lease) time.Duration { return l.deadline - l.length/2 }
	case BugSkipCommitHardState:
		// Planted bug (a real one, fixed): a hard state that only moves the
		// commit index is not written, while compaction stores snapshots
		// past the stored commit; the member then cannot restart.
		h.hardStateToSave = func(rd *raft.Ready) *raftpb.HardState {
			if rd.MustSync {
				return rd.HardState
			}
			return nil
		}
	}
	return h
}

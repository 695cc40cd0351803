package node

import "time"

// hooks are the points where a planted bug replaces correct behaviour. They
// are chosen once, in New, from Config.Bug, so decision code calls a hook
// instead of testing which bug is planted.
type hooks struct {
	// expireAt is when the leader proposes the Expire of l.
	expireAt func(l lease) time.Duration
}

func plantHooks(bug string) hooks {
	h := hooks{expireAt: func(l lease) time.Duration { return l.deadline }}
	if bug == BugEarlyExpire {
		// Planted bug: the leader expires a lock at half its lease.
		h.expireAt = func(l lease) time.Duration { return l.deadline - l.length/2 }
	}
	return h
}

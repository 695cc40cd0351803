package peer

import (
	"sync"
	"time"
)

// repeatWindow is how long a refusal's reason is logged once: a peer that
// is refused redials every peerRedialPeriod, and a line per dial (a member
// of an old cluster left running, a wiped member) buries everything else
// in the log while saying nothing new.
const repeatWindow = 30 * time.Second

// maxRepeatReasons bounds the reasons remembered: a sender can vary its
// reason (a new id per hello), and the log, not memory, pays for that.
const maxRepeatReasons = 256

// repeats decides which of a stream of log reasons are logged: the first
// of each reason in a window, and with it how many were held back since
// the last one logged. Safe for concurrent use.
type repeats struct {
	mu     sync.Mutex
	window time.Duration
	now    func() time.Time
	seen   map[string]*repeat
}

type repeat struct {
	logged time.Time // when this reason was last logged
	held   int       // occurrences since then, not logged
}

func newRepeats(window time.Duration, now func() time.Time) *repeats {
	return &repeats{window: window, now: now, seen: map[string]*repeat{}}
}

// log reports whether to log reason now, and how many occurrences of it
// were held back since it was last logged.
func (r *repeats) log(reason string) (ok bool, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if e, found := r.seen[reason]; found {
		if now.Sub(e.logged) < r.window {
			e.held++
			return false, 0
		}
		held, e.held, e.logged = e.held, 0, now
		return true, held
	}
	if len(r.seen) >= maxRepeatReasons {
		for k, e := range r.seen {
			if now.Sub(e.logged) >= r.window {
				delete(r.seen, k)
			}
		}
		if len(r.seen) >= maxRepeatReasons {
			return true, 0 // too many live reasons to remember: log, do not remember
		}
	}
	r.seen[reason] = &repeat{logged: now}
	return true, 0
}

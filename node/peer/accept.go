package peer

import (
	"errors"
	"fmt"
	"time"
)

const (
	// acceptRetryMin and acceptRetryMax bound the pause after a failed
	// accept, doubled at each failure in a row (net/http's Server.Serve
	// does the same).
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
	// listenerFailingAfter is how long accepts must have failed, with
	// none succeeding, before ListenerErr reports the listener broken: a
	// brief shortage of file descriptors is not worth failing a health
	// check for.
	listenerFailingAfter = 2 * time.Second
)

// errEvicted ends a connection the pending pool closed to make room
// (pending.go); it is counted there, never logged.
var errEvicted = errors.New("pending peer connection closed to make room for newer ones")

// acceptFailures is the accept loop's record of its failures in a row.
type acceptFailures struct {
	since time.Time // first failure since the last accept that worked; zero: none
	last  time.Time // the latest failure
	err   error     // its error
}

// acceptFailed records a failed accept, counts it, and logs it (once
// per reason per repeatWindow: a listener out of file descriptors fails
// every acceptRetryMax).
func (t *TCP) acceptFailed(err error, pause time.Duration) {
	now := t.now()
	t.acceptMu.Lock()
	if t.acceptFails.since.IsZero() {
		t.acceptFails.since = now
	}
	t.acceptFails.last, t.acceptFails.err = now, err
	t.acceptMu.Unlock()
	if t.onAcceptError != nil {
		t.onAcceptError()
	}
	if ok, held := t.refusals.log("accept: " + err.Error()); ok {
		t.log.Error("peer accept failed; retrying", "addr", t.listenAddr, "err", err, "retry_in", pause, "same_error_since_last_line", held)
	}
}

// acceptSucceeded clears the record of failures.
func (t *TCP) acceptSucceeded() {
	t.acceptMu.Lock()
	t.acceptFails = acceptFailures{}
	t.acceptMu.Unlock()
}

// ListenerErr says whether the peer port is broken: nil while accepting
// works, an error naming the last failure when accepts have failed, none
// working, for more than listenerFailingAfter. Accepts that stopped
// failing but have had no connection to take since are not failing: the
// record goes stale after a few retry pauses without a failure.
func (t *TCP) ListenerErr() error {
	t.acceptMu.Lock()
	f := t.acceptFails
	t.acceptMu.Unlock()
	if f.since.IsZero() {
		return nil
	}
	now := t.now()
	if now.Sub(f.last) > 2*acceptRetryMax || f.last.Sub(f.since) < t.failingAfter {
		return nil
	}
	return fmt.Errorf("peer listener %s: every accept has failed for %s: %w", t.listenAddr, now.Sub(f.since).Round(time.Millisecond), f.err)
}

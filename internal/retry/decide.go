package retry

// The retry policy every raftlock client follows (the binary client, the
// API clients and the simulator's client): what one attempt of a call came
// to decides what the client does next, the same way whatever the
// transport. It is a pure function so that one table test holds it.

// An Outcome is what one attempt of a call came to.
type Outcome uint8

const (
	// Answered: a final answer, the call's (granted, held, not found,
	// invalid, denied, a member's error...).
	Answered Outcome = iota
	// Redirected: a follower named the leader; nothing was proposed.
	Redirected
	// Overloaded: the member refused it before proposing anything (a
	// limit): a retry is safe, at the same member once it had a moment.
	Overloaded
	// Unavailable: the member decided nothing (no leader, stopping, not
	// caught up): a retry is safe, elsewhere.
	Unavailable
	// NotSent: the attempt never reached a member (the dial failed, the
	// connection was refused or went away before the request left).
	NotSent
	// Lost: the attempt may have reached a member, and no answer came
	// (the connection broke with it in flight).
	Lost
)

// A Decision is what a client does after an attempt.
type Decision uint8

const (
	// Return: the attempt's answer (or error) is the call's.
	Return Decision = iota
	// Follow: to the leader the redirect named, at once: a redirect is
	// an answer, not a failure.
	Follow
	// FollowLater: to the leader the redirect named, after a backoff (the
	// call has been redirected MaxRedirects times: leadership is moving).
	FollowLater
	// Again: the same member, after a backoff.
	Again
	// Next: the next member, after a backoff; the member tried is no
	// longer taken for the leader.
	Next
	// Unknown: give up with the outcome unknown: a call that changes
	// state may have applied, so sending it again could apply it twice.
	Unknown
)

// MaxRedirects is a call's budget of redirects followed at once.
const MaxRedirects = 3

// Decide is the policy: what to do after an attempt of a call that came
// to o, when the call is idempotent (a read, safe to send twice) or not,
// and has been redirected redirects times before (its budget).
func Decide(o Outcome, idempotent bool, redirects int) Decision {
	switch o {
	case Redirected:
		if redirects < MaxRedirects {
			return Follow
		}
		return FollowLater
	case Overloaded:
		return Again
	case Unavailable, NotSent:
		return Next
	case Lost:
		if idempotent {
			return Next
		}
		return Unknown
	}
	return Return
}

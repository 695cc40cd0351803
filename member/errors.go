package member

import (
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/lockrule"
)

// Errors a lock call returns. The client server maps each to one answer.
var (
	// ErrHeld: a try-acquire found the key held, or a waiting acquire's
	// wait ran out.
	ErrHeld = errors.New("lock is held")
	// ErrNotFound: the caller's token does not hold the key.
	ErrNotFound = errors.New("not the holder")
	// ErrUnavailable: nothing was proposed (no leader, leadership not yet
	// settled, proposal dropped); the call is safe to retry.
	ErrUnavailable = errors.New("unavailable")
	// ErrOutcomeUnknown: a command was proposed and leadership was lost
	// before it applied; it may or may not commit.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrGrantRejected: the defensive state machine outcome; reported as
	// an error, never a success.
	ErrGrantRejected = errors.New("grant rejected by the state machine")
	// ErrCommitBeyondLog: a peer message told this member that entries
	// past the end of its stored log are committed. A leader never sends
	// that to a member that kept what it acknowledged: the message is
	// forged, or this member lost acknowledged entries (a disk that lies
	// about fsync).
	ErrCommitBeyondLog = errors.New("commit index beyond the stored log")
	// ErrStopped: the node is shutting down.
	ErrStopped = errors.New("node stopped")
	// ErrOverloaded: a limit of the member (pending calls, waiters, keys)
	// was reached; nothing was proposed, so the call is safe to retry.
	ErrOverloaded = errors.New("overloaded")
)

// NotLeaderError answers a call made to a follower.
type NotLeaderError struct {
	LeaderID   uint64 // 0 when no leader is known
	LeaderAddr string // the leader's client address, when known
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == 0 {
		return "not the leader; no leader known"
	}
	return fmt.Sprintf("not the leader; leader is %d at %s", e.LeaderID, e.LeaderAddr)
}

// InvalidArgumentError is bad input from a caller.
type InvalidArgumentError struct{ Reason string }

func (e *InvalidArgumentError) Error() string { return "invalid argument: " + e.Reason }

// ValidateKey checks a lock key against rule 10's bound (lockrule, which
// the client protocol checks too): a member checks it itself, whoever
// calls it. Its bound is a stored key's: the key rule's text part is the
// entries' (the client port's), so keys stored before it stay nameable.
func ValidateKey(key string) error { return invalid(lockrule.ValidateStoredKey(key)) }

// ValidateLease checks a lease length in milliseconds; the message shows
// the value given.
func ValidateLease(ms int64) error { return invalid(lockrule.ValidateLease(ms)) }

// invalid is err as an InvalidArgumentError (nil for nil).
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return &InvalidArgumentError{Reason: err.Error()}
}

// LoggedCommand is one committed command with the result it had when
// applied: what a post-run audit matches against a client history.
type LoggedCommand struct {
	Index  uint64 `json:"index"`
	Term   uint64 `json:"term"`
	Op     string `json:"op"`
	Key    string `json:"key"`
	Tag    uint64 `json:"tag,omitempty"`
	Status string `json:"status"`
	Token  uint64 `json:"token,omitempty"`
}

// NewLoggedCommand describes env of entry (index, term) applied with res.
func NewLoggedCommand(index, term uint64, env fsm.Envelope, res fsm.Result) LoggedCommand {
	return LoggedCommand{Index: index, Term: term, Op: env.Cmd.Op.String(),
		Key: env.Cmd.Key, Tag: env.Tag, Status: res.Status.String(), Token: res.Token}
}

package node

import "github.com/raftlock/raftlock/member"

// The errors a lock call returns are the member core's; they are repeated
// here so callers of the in-process API need only this package.
var (
	ErrHeld           = member.ErrHeld
	ErrNotFound       = member.ErrNotFound
	ErrUnavailable    = member.ErrUnavailable
	ErrOutcomeUnknown = member.ErrOutcomeUnknown
	ErrGrantRejected  = member.ErrGrantRejected
	ErrStopped        = member.ErrStopped
	ErrOverloaded     = member.ErrOverloaded
)

type (
	// NotLeaderError answers a call made to a follower.
	NotLeaderError = member.NotLeaderError
	// InvalidArgumentError is bad input from a caller.
	InvalidArgumentError = member.InvalidArgumentError
	// LoggedCommand is one committed command with its result.
	LoggedCommand = member.LoggedCommand
	// LockInfo answers Get.
	LockInfo = member.LockInfo
)

package client

import (
	"errors"
	"testing"

	"github.com/raftlock/raftlock/client/wire"
)

// An answer's error says the member's reason once: a reason that only
// names the error again is not repeated, and another is kept.
func TestAnswerErrorSaysTheReasonOnce(t *testing.T) {
	for _, tc := range []struct {
		op     wire.Op
		reason string
		kind   error
		want   string
	}{
		{wire.OpOutcomeUnknown, "outcome unknown", ErrOutcomeUnknown, "raftlock: outcome unknown"},
		{wire.OpOutcomeUnknown, "", ErrOutcomeUnknown, "raftlock: outcome unknown"},
		{wire.OpOutcomeUnknown, "leadership lost before commit", ErrOutcomeUnknown, "raftlock: outcome unknown: leadership lost before commit"},
		{wire.OpOverloaded, "too many keys held", ErrOverloaded, ErrOverloaded.Error() + ": too many keys held"},
	} {
		err := answerError(wire.Response{Op: tc.op, Reason: tc.reason})
		if !errors.Is(err, tc.kind) || err.Error() != tc.want {
			t.Errorf("answer %v %q: error %q, want %q wrapping %v", tc.op, tc.reason, err, tc.want, tc.kind)
		}
	}
}

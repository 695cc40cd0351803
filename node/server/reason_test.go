package server

import (
	"fmt"
	"testing"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// An error answer's reason does not repeat its kind, which the answer's op
// says and the APIs print before the reason: the gRPC API said
// "unavailable: unavailable: the leader is handing leadership over". A
// bare kind gets what it means as its reason.
func TestReasonNamesItsKindOnce(t *testing.T) {
	for _, tc := range []struct {
		err    error
		op     wire.Op
		reason string
	}{
		{member.ErrHandingOver, wire.OpUnavailable, "the leader is handing leadership over"},
		{fmt.Errorf("%w: 5 acquires already wait (limit 5)", node.ErrOverloaded), wire.OpOverloaded, "5 acquires already wait (limit 5)"},
		{node.ErrUnavailable, wire.OpUnavailable, "the call cannot be decided now; try again"},
		{node.ErrOutcomeUnknown, wire.OpOutcomeUnknown, "leadership changed while the command was in flight: it may or may not apply"},
		{node.ErrStopped, wire.OpUnavailable, "node stopped"},
	} {
		var resp wire.Response
		errorResponse(&resp, tc.err)
		if resp.Op != tc.op || resp.Reason != tc.reason {
			t.Errorf("%v: answer 0x%02x %q, want 0x%02x %q", tc.err, uint8(resp.Op), resp.Reason, uint8(tc.op), tc.reason)
		}
	}
}

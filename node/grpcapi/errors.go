package grpcapi

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/httpapi"
	raftlockv1 "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// codeOf maps an error answer to its gRPC status code, as
// docs/grpc-api.md tables it. Only UNAVAILABLE with the Error detail is
// safe to retry as it is (nothing was proposed: without the detail gRPC
// made it, and a lock change's outcome is unknown); UNKNOWN is kept for
// outcome-unknown alone (the command may have applied), so a client tells
// "may have applied" from "nothing happened" by the code and the detail;
// anything else the member answers is INTERNAL.
func codeOf(op wire.Op) codes.Code {
	switch op {
	case wire.OpHeld:
		return codes.FailedPrecondition
	case wire.OpNotFound:
		return codes.NotFound
	case wire.OpInvalidArgument:
		return codes.InvalidArgument
	case wire.OpPermissionDenied:
		return codes.PermissionDenied
	case wire.OpUnavailable, wire.OpOverloaded, wire.OpRedirect:
		return codes.Unavailable
	case wire.OpCompacted:
		return codes.OutOfRange // etcd's answer to a compacted revision
	case wire.OpOutcomeUnknown:
		return codes.Unknown
	}
	return codes.Internal
}

// errorStatus is the status of resp, a failed answer to req: its code, the
// message "NAME: why" and an Error detail. A follower's redirect is
// UNAVAILABLE naming the leader and its API address when known here.
func (a *API) errorStatus(resp *wire.Response, req *wire.Request) error {
	if resp.Op == wire.OpRedirect {
		api := a.b.PeerAPIAddr(resp.LeaderID)
		if api == "" { // nobody to send the caller to: the leader is unknown
			return withError(codes.Unavailable, &raftlockv1.Error{Name: wire.ErrorNameUnavailable, Message: httpapi.LeaderUnknown(resp.LeaderID)})
		}
		return withError(codes.Unavailable, &raftlockv1.Error{Name: wire.ErrorNameUnavailable, LeaderId: resp.LeaderID, LeaderApi: api,
			Message: fmt.Sprintf("not the leader; the leader is member %d at %s", resp.LeaderID, api)})
	}
	name := wire.ErrorName(resp.Op)
	if name == "" {
		name = wire.ErrorNameError
	}
	return withError(codeOf(resp.Op), &raftlockv1.Error{Name: name, Message: httpapi.ErrorMessage(resp, req)})
}

// withError is the status code with e as its detail and "NAME: message"
// as its message, made text: a detail that is not UTF-8 would not encode.
func withError(code codes.Code, e *raftlockv1.Error) error {
	e.Message = wire.AsText(e.Message)
	st := status.New(code, e.Name+": "+e.Message)
	if d, err := st.WithDetails(e); err == nil {
		st = d
	}
	return st.Err()
}

// invalid is an INVALID_ARGUMENT refusal of a call before it reached the
// member.
func invalid(err error) error {
	return withError(codes.InvalidArgument, &raftlockv1.Error{Name: wire.ErrorNameInvalidArgument, Message: err.Error()})
}

// overloaded refuses a call when all n of the API's slots for what are taken.
func overloaded(what string, n int) error {
	return withError(codes.Unavailable, &raftlockv1.Error{Name: wire.ErrorNameOverloaded, Message: fmt.Sprintf("%d %s in progress on this member (limit %d)", n, what, n)})
}

// overloadedBy refuses a call for err, a limit of the member (an
// identity's share, server.IdentityLimitError): UNAVAILABLE, name
// overloaded, with err's words after the name.
func overloadedBy(err error) error {
	msg, _ := strings.CutPrefix(err.Error(), node.ErrOverloaded.Error()+": ")
	return withError(codes.Unavailable, &raftlockv1.Error{Name: wire.ErrorNameOverloaded, Message: msg})
}

// ErrorOf is the Error detail of err, a status from this API, or nil when
// it carries none: how a Go caller reads the error's name and the leader's
// API address.
func ErrorOf(err error) *raftlockv1.Error { return apiclient.ErrorDetail(err) }

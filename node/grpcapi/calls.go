package grpcapi

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
	raftlockv1 "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// The unary calls: each request message becomes the client protocol's
// request (the *Request functions below, which refuse on any member what no lock
// could take, so a follower answers INVALID_ARGUMENT rather than naming
// the leader) and its answer the response message, field for field as
// the HTTP/JSON API's bodies.

// Acquire takes a lock (AcquireRequest).
func (a *API) Acquire(ctx context.Context, in *raftlockv1.AcquireRequest) (*raftlockv1.AcquireResponse, error) {
	req, err := acquireRequest(in)
	if err != nil {
		return nil, invalid(err)
	}
	// ctx ends when the caller hangs up or its deadline passes: a waiting
	// acquire then leaves the queue, and a grant that applies after is
	// released (rule 7).
	resp, err := a.do(ctx, member.OpAcquire.String(), req, wire.OpGranted)
	if err != nil {
		return nil, err
	}
	return &raftlockv1.AcquireResponse{Key: req.Key, Token: resp.Token, LeaseMs: resp.LeaseMS}, nil // a key of the key rule: text
}

// Release frees a lock held with its token.
func (a *API) Release(ctx context.Context, in *raftlockv1.ReleaseRequest) (*raftlockv1.ReleaseResponse, error) {
	req, err := releaseRequest(in)
	if err != nil {
		return nil, invalid(err)
	}
	resp, err := a.do(ctx, member.OpRelease.String(), req, wire.OpReleased)
	if err != nil {
		return nil, err
	}
	token := req.Token
	if req.Force {
		token = resp.Token // the holder's, which it ended
	}
	return &raftlockv1.ReleaseResponse{Key: wire.AsText(req.Key), KeyBytes: keyBytes(req.Key), Token: token, Released: true}, nil
}

// Renew starts the holder's lease again.
func (a *API) Renew(ctx context.Context, in *raftlockv1.RenewRequest) (*raftlockv1.RenewResponse, error) {
	req, err := renewRequest(in)
	if err != nil {
		return nil, invalid(err)
	}
	if _, err := a.do(ctx, member.OpRenew.String(), req, wire.OpRenewed); err != nil {
		return nil, err
	}
	return &raftlockv1.RenewResponse{Key: wire.AsText(req.Key), KeyBytes: keyBytes(req.Key), Token: req.Token, LeaseMs: req.LeaseMS}, nil
}

// Get reads one lock, linearizably.
func (a *API) Get(ctx context.Context, in *raftlockv1.GetRequest) (*raftlockv1.GetResponse, error) {
	req, err := getRequest(in)
	if err != nil {
		return nil, invalid(err)
	}
	resp, err := a.do(ctx, member.OpGet.String(), req, wire.OpValue)
	if err != nil {
		return nil, err
	}
	out := &raftlockv1.GetResponse{Key: wire.AsText(req.Key), KeyBytes: keyBytes(req.Key), Held: resp.Held, Token: resp.Token, RemainingMs: resp.RemainingMS}
	if resp.Held {
		out.Owner = wire.AsText(resp.Owner)
	}
	return out, nil
}

// List reads one page of the held locks under a prefix.
func (a *API) List(ctx context.Context, in *raftlockv1.ListRequest) (*raftlockv1.ListResponse, error) {
	req, err := listRequest(in)
	if err != nil {
		return nil, invalid(err)
	}
	resp, err := a.do(ctx, member.OpList.String(), req, wire.OpLocks)
	if err != nil {
		return nil, err
	}
	out := &raftlockv1.ListResponse{Locks: make([]*raftlockv1.Lock, len(resp.Locks)), More: resp.More}
	for i, l := range resp.Locks {
		out.Locks[i] = &raftlockv1.Lock{Key: wire.AsText(l.Key), KeyBytes: keyBytes(l.Key), Token: l.Token,
			Owner: wire.AsText(l.Owner), RemainingMs: l.RemainingMS}
	}
	if resp.More && len(resp.Locks) > 0 {
		next := resp.Locks[len(resp.Locks)-1].Key
		out.Next, out.NextBytes = wire.AsText(next), keyBytes(next)
	}
	return out, nil
}

// Status is this member's status (the admin right).
func (a *API) Status(ctx context.Context, in *raftlockv1.StatusRequest) (*raftlockv1.StatusResponse, error) {
	if err := refused(in); err != nil {
		return nil, invalid(err)
	}
	resp, err := a.do(ctx, "status", &wire.Request{ID: 1, Op: wire.OpStatus}, wire.OpStatusInfo)
	if err != nil {
		return nil, err
	}
	st := resp.Status
	return &raftlockv1.StatusResponse{
		Id: st.ID, Addr: st.Addr, Role: st.Role, Term: st.Term, Leader: st.Leader, LeaderAddr: st.LeaderAddr,
		Commit: st.Commit, Applied: st.Applied, Locks: st.Locks, LastToken: st.LastToken, Digest: st.Digest,
		Voters: st.Voters, Learners: st.Learners,
	}, nil
}

// keyed is req with a request id, unless its key is one no lock can have.
// A new key (an acquire's) must keep the key rule; any other call may name
// a key stored before it, which only needs its length.
func keyed(req *wire.Request) (*wire.Request, error) {
	check := wire.ValidateStoredKey
	if req.Op == wire.OpAcquire {
		check = wire.ValidateKey
	}
	if err := check(req.Key); err != nil {
		return nil, err
	}
	req.ID = 1
	return req, nil
}

// bytesOf is the key (or after) a message names: text, or raw when set,
// for a key that is not UTF-8; setting both is refused, as ambiguous.
func bytesOf(field, text string, raw []byte) (string, error) {
	if len(raw) == 0 {
		return text, nil
	}
	if text != "" {
		return "", fmt.Errorf("set %s or %s_bytes, not both", field, field)
	}
	return string(raw), nil
}

// keyBytes is key as a response's key_bytes: nil when it is UTF-8 (key
// says it), else the key itself, which key shows as wire.AsText.
func keyBytes(key string) []byte {
	if utf8.ValidString(key) {
		return nil
	}
	return []byte(key)
}

// acquireRequest is the client protocol's request for in, or why no
// member would take it.
func acquireRequest(in *raftlockv1.AcquireRequest) (*wire.Request, error) {
	if err := refused(in); err != nil {
		return nil, err
	}
	if err := wire.ValidateOwner(in.GetOwner()); err != nil {
		return nil, err
	}
	return keyed(&wire.Request{Op: wire.OpAcquire, Key: in.GetKey(), LeaseMS: in.GetLeaseMs(), WaitMS: in.GetWaitMs(), Owner: in.GetOwner(), Tag: in.GetTag()})
}

// releaseRequest is the client protocol's request for in.
func releaseRequest(in *raftlockv1.ReleaseRequest) (*wire.Request, error) {
	if err := refused(in); err != nil {
		return nil, err
	}
	key, err := bytesOf("key", in.GetKey(), in.GetKeyBytes())
	if err != nil {
		return nil, err
	}
	if in.GetForce() {
		// Whatever its token, as release --force: the answer names it.
		return keyed(&wire.Request{Op: wire.OpRelease, Key: key, Force: true, Tag: in.GetTag()})
	}
	return keyed(&wire.Request{Op: wire.OpRelease, Key: key, Token: in.GetToken(), Tag: in.GetTag()})
}

// renewRequest is the client protocol's request for in.
func renewRequest(in *raftlockv1.RenewRequest) (*wire.Request, error) {
	if err := refused(in); err != nil {
		return nil, err
	}
	key, err := bytesOf("key", in.GetKey(), in.GetKeyBytes())
	if err != nil {
		return nil, err
	}
	return keyed(&wire.Request{Op: wire.OpRenew, Key: key, Token: in.GetToken(), LeaseMS: in.GetLeaseMs(), Tag: in.GetTag()})
}

// getRequest is the client protocol's request for in.
func getRequest(in *raftlockv1.GetRequest) (*wire.Request, error) {
	if err := refused(in); err != nil {
		return nil, err
	}
	key, err := bytesOf("key", in.GetKey(), in.GetKeyBytes())
	if err != nil {
		return nil, err
	}
	return keyed(&wire.Request{Op: wire.OpGet, Key: key})
}

// listRequest is the client protocol's request for in; the member checks
// its limit and prefix.
func listRequest(in *raftlockv1.ListRequest) (*wire.Request, error) {
	if err := refused(in); err != nil {
		return nil, err
	}
	after, err := bytesOf("after", in.GetAfter(), in.GetAfterBytes())
	if err != nil {
		return nil, err
	}
	return &wire.Request{ID: 1, Op: wire.OpList, Prefix: in.GetPrefix(), After: after, Limit: in.GetLimit()}, nil
}

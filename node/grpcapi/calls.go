package grpcapi

import (
	"context"

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
	return &raftlockv1.AcquireResponse{Key: req.Key, Token: resp.Token, LeaseMs: resp.LeaseMS}, nil
}

// Release frees a lock held with its token.
func (a *API) Release(ctx context.Context, in *raftlockv1.ReleaseRequest) (*raftlockv1.ReleaseResponse, error) {
	req, err := releaseRequest(in)
	if err != nil {
		return nil, invalid(err)
	}
	if _, err := a.do(ctx, member.OpRelease.String(), req, wire.OpReleased); err != nil {
		return nil, err
	}
	return &raftlockv1.ReleaseResponse{Key: req.Key, Token: req.Token, Released: true}, nil
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
	return &raftlockv1.RenewResponse{Key: req.Key, Token: req.Token, LeaseMs: req.LeaseMS}, nil
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
	out := &raftlockv1.GetResponse{Key: req.Key, Held: resp.Held, Token: resp.Token, RemainingMs: resp.RemainingMS}
	if resp.Held {
		out.Owner = resp.Owner
	}
	return out, nil
}

// List reads one page of the held locks under a prefix.
func (a *API) List(ctx context.Context, in *raftlockv1.ListRequest) (*raftlockv1.ListResponse, error) {
	req := listRequest(in)
	resp, err := a.do(ctx, member.OpList.String(), req, wire.OpLocks)
	if err != nil {
		return nil, err
	}
	out := &raftlockv1.ListResponse{Locks: make([]*raftlockv1.Lock, len(resp.Locks)), More: resp.More}
	for i, l := range resp.Locks {
		out.Locks[i] = &raftlockv1.Lock{Key: l.Key, Token: l.Token, Owner: l.Owner, RemainingMs: l.RemainingMS}
	}
	if resp.More && len(resp.Locks) > 0 {
		out.Next = resp.Locks[len(resp.Locks)-1].Key
	}
	return out, nil
}

// Status is this member's status (the admin right).
func (a *API) Status(ctx context.Context, _ *raftlockv1.StatusRequest) (*raftlockv1.StatusResponse, error) {
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
func keyed(req *wire.Request) (*wire.Request, error) {
	if err := wire.ValidateKey(req.Key); err != nil {
		return nil, err
	}
	req.ID = 1
	return req, nil
}

// acquireRequest is the client protocol's request for in, or why no
// member would take it.
func acquireRequest(in *raftlockv1.AcquireRequest) (*wire.Request, error) {
	if err := wire.ValidateOwner(in.GetOwner()); err != nil {
		return nil, err
	}
	return keyed(&wire.Request{Op: wire.OpAcquire, Key: in.GetKey(), LeaseMS: in.GetLeaseMs(), WaitMS: in.GetWaitMs(), Owner: in.GetOwner()})
}

// releaseRequest is the client protocol's request for in.
func releaseRequest(in *raftlockv1.ReleaseRequest) (*wire.Request, error) {
	return keyed(&wire.Request{Op: wire.OpRelease, Key: in.GetKey(), Token: in.GetToken()})
}

// renewRequest is the client protocol's request for in.
func renewRequest(in *raftlockv1.RenewRequest) (*wire.Request, error) {
	return keyed(&wire.Request{Op: wire.OpRenew, Key: in.GetKey(), Token: in.GetToken(), LeaseMS: in.GetLeaseMs()})
}

// getRequest is the client protocol's request for in.
func getRequest(in *raftlockv1.GetRequest) (*wire.Request, error) {
	return keyed(&wire.Request{Op: wire.OpGet, Key: in.GetKey()})
}

// listRequest is the client protocol's request for in; the member checks
// its limit and prefix.
func listRequest(in *raftlockv1.ListRequest) *wire.Request {
	return &wire.Request{ID: 1, Op: wire.OpList, Prefix: in.GetPrefix(), After: in.GetAfter(), Limit: in.GetLimit()}
}

package server

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/raftlock/raftlock/client/wire"
)

// KeepAlive is a keep-alive of one held lock, as both APIs serve it
// (gRPC's KeepAlive stream, HTTP's POST /v1/keepalive): renew the lock at
// once, then every third of its lease, telling the caller of each renewal,
// until the caller stops or a renewal shows the lock lost. A renewal
// answered unavailable, overloaded or outcome-unknown is tried again
// after a jittered backoff (20 ms doubling up to a third of the lease),
// until a whole lease has passed since the last renewal that succeeded
// began: the cluster may have expired the lock by then.
type KeepAlive struct {
	// Renew runs one renewal of Req within ctx (nil: ctx ended first).
	Renew func(ctx context.Context, req *wire.Request) *wire.Response
	// Renewed tells the caller of a renewal; an error ends the
	// keep-alive with it.
	Renewed func() error
	// Stop, when it yields, ends the keep-alive with what it yields (the
	// caller closed its side: nil; the API stops: why).
	Stop <-chan error
	Req  *wire.Request
}

// KeepAliveEnd is why a keep-alive ended by the cluster's answer: Lost
// (the token no longer holds the lock, or no renewal went through within
// a lease: Why says which), or Answer, a redirect, permission denied or
// invalid argument, for the API to answer as it answers that.
type KeepAliveEnd struct {
	Lost   bool
	Why    string
	Answer *wire.Response
}

func (e *KeepAliveEnd) Error() string {
	if e.Lost {
		return "lock lost: " + e.Why
	}
	return "keep-alive ended: " + e.Answer.Reason
}

// Run runs the keep-alive until ctx ends (its error), Stop yields (what
// it yields), Renewed fails (its error) or the cluster ends it
// (*KeepAliveEnd).
func (k KeepAlive) Run(ctx context.Context) error {
	lease := time.Duration(k.Req.LeaseMS) * time.Millisecond
	every := max(lease/3, 5*time.Millisecond)
	next := time.NewTimer(every)
	defer next.Stop()
	var retry time.Duration // the backoff after a renewal that did not go through
	for validFrom := time.Now(); ; {
		renewedFrom, err := k.renew(ctx, validFrom, lease)
		if err != nil {
			return err
		}
		wait := every
		if renewedFrom.Equal(validFrom) {
			// Unavailable, overloaded or unknown: again soon, jittered
			// (so that thousands of keep-alives refused together do not
			// come back together), not a third of a lease later.
			retry = min(max(2*retry, 20*time.Millisecond), every)
			wait = retry/2 + rand.N(retry/2+1)
		} else {
			retry = 0
		}
		validFrom = renewedFrom
		next.Reset(wait)
		select {
		case err := <-k.Stop:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-next.C:
		}
	}
}

// renew renews the lock once for a keep-alive whose lease was last
// counted from validFrom, and returns the time it is counted from now; an
// error ends the keep-alive.
func (k KeepAlive) renew(ctx context.Context, validFrom time.Time, lease time.Duration) (time.Time, error) {
	start := time.Now()
	deadline := validFrom.Add(lease)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	resp := k.Renew(rctx, k.Req)
	cancel()
	switch {
	case ctx.Err() != nil:
		return validFrom, ctx.Err()
	case resp != nil && resp.Op == wire.OpRenewed:
		return start, k.Renewed()
	case resp != nil && resp.Op == wire.OpNotFound:
		return validFrom, &KeepAliveEnd{Lost: true, Why: "the cluster says the token no longer holds it (released, forced or expired)"}
	case resp != nil && (resp.Op == wire.OpRedirect || resp.Op == wire.OpPermissionDenied || resp.Op == wire.OpInvalidArgument):
		return validFrom, &KeepAliveEnd{Answer: resp}
	case !time.Now().Before(deadline):
		return validFrom, &KeepAliveEnd{Lost: true, Why: "a whole lease passed without a renewal succeeding"}
	}
	return validFrom, nil // unavailable, overloaded, outcome unknown: again after a backoff
}

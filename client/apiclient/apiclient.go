// Package apiclient holds Go clients of a member's API port (raftlock node
// --api): HTTP/JSON (NewHTTP) and gRPC (NewGRPC). Each offers the binary
// client's lock calls (AcquireWith, RenewTagged, ReleaseTagged,
// ForceReleaseTagged, Get, List, Close) with its errors (client.ErrHeld,
// client.ErrNotFound, *client.InvalidArgumentError, client.ErrOutcomeUnknown
// ...) and its retry rules: a follower's redirect is followed to the
// leader, an answer saying nothing was proposed (unavailable, overloaded)
// is retried with a jittered backoff until the call's deadline, a call
// that never reached a member is sent elsewhere, and a lock-changing call
// that may have reached one and got no answer is never sent again: it
// returns client.ErrOutcomeUnknown. No answer is a broken connection, or
// a failure the member did not make: a gRPC status without the API's
// Error detail (UNAVAILABLE from a connection reset as a member dies, or
// from a proxy), an HTTP answer without raftlock's JSON error body (a
// proxy's 502, 503 or 504). Only the member's own unavailable and
// overloaded say that nothing was proposed. The chaos harness and the
// bench use them to drive a cluster over each protocol; any Go program
// may.
package apiclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/retry"
)

// attempt is what one try of a call at one member came to.
type attempt struct {
	// err is the call's error: nil (success) or its answer's, returned
	// as it is unless a field below says otherwise; or, with failed, why
	// no answer came.
	err error
	// failed: no answer came (the connection failed or broke); sent says
	// whether the request may have reached the member before it did.
	failed, sent bool
	// redirect is the leader's address, to ask there instead.
	redirect string
	// overloaded: the member proposed nothing and is busy; ask it again
	// after a backoff. unavailable: it proposed nothing and cannot
	// serve now (no leader, stopping); ask the next member.
	overloaded, unavailable bool
}

// retrier is the retry loop the clients share: where to send (the
// leader when known, else the endpoints in turn) and what to do with
// each attempt.
type retrier struct {
	endpoints []string
	*retry.Targets
	// beforeBackoff, when set (by tests, export_test.go), is called before
	// each wait between two attempts, with why the last one failed: the
	// one moment no attempt is in flight, which a test cannot reach by
	// timing on a loaded machine.
	beforeBackoff func(ctx context.Context, lastErr error)
}

// newRetrier is the retry loop of a client of endpoints, each written as
// the client's transport dials it (address), without a trailing slash.
func newRetrier(endpoints []string, address func(endpoint string) string) (*retrier, error) {
	addrs := make([]string, 0, len(endpoints))
	for _, e := range endpoints {
		addrs = append(addrs, strings.TrimSuffix(address(e), "/"))
	}
	t, err := retry.NewTargets(addrs)
	if err != nil {
		return nil, err
	}
	return &retrier{endpoints: t.Endpoints(), Targets: t}, nil
}

// do runs try until it answers, following redirects and retrying what is
// safe until ctx ends. idempotent marks reads, which are retried even
// when the request may have reached a member.
func (r *retrier) do(ctx context.Context, idempotent bool, try func(ctx context.Context, target string) attempt) error {
	var backoff retry.Backoff
	var lastErr error
	refused := map[string]bool{}
	target := r.Next("")
	for redirects := 0; ; {
		if err := ctx.Err(); err != nil {
			// Only overloaded is wrapped, as the binary client does: the
			// harness reads an unwrapped give-up as an unknown outcome.
			if errors.Is(lastErr, client.ErrOverloaded) {
				return fmt.Errorf("gave up at the deadline: %w (%w)", lastErr, err)
			}
			if lastErr != nil {
				return fmt.Errorf("gave up at the deadline: %v (%w)", lastErr, err)
			}
			return err
		}
		a := try(ctx, target)
		outcome := a.outcome()
		if outcome == retry.NotSent && errors.Is(a.err, syscall.ECONNREFUSED) && slices.Contains(r.endpoints, target) {
			if refused[target] = true; len(refused) == len(r.endpoints) {
				return fmt.Errorf("%w at %s: every member refused the connection", client.ErrNoMember, strings.Join(r.endpoints, ","))
			}
		}
		switch retry.Decide(outcome, idempotent, redirects) {
		case retry.Return:
			return a.err
		case retry.Follow:
			redirects++
			r.SetLeader(a.redirect)
			target = a.redirect
			continue // a redirect is an answer, not a failure: no backoff
		case retry.FollowLater:
			redirects++
			r.SetLeader(a.redirect)
			target = a.redirect
			lastErr = fmt.Errorf("redirected to %s", a.redirect)
		case retry.Again:
			lastErr = a.err
		case retry.Next:
			lastErr = a.err
			r.ForgetLeader(target)
			target = r.Next(target)
		case retry.Unknown:
			r.ForgetLeader(target)
			return fmt.Errorf("%w: %w", client.ErrOutcomeUnknown, a.err)
		}
		if r.beforeBackoff != nil {
			r.beforeBackoff(ctx, lastErr)
		}
		backoff.Wait(ctx)
	}
}

// outcome is what the attempt came to, for the retry policy.
func (a attempt) outcome() retry.Outcome {
	switch {
	case a.redirect != "":
		return retry.Redirected
	case a.overloaded:
		return retry.Overloaded
	case a.unavailable:
		return retry.Unavailable
	case !a.failed:
		return retry.Answered
	case a.sent:
		return retry.Lost
	}
	return retry.NotSent
}

// errorOf is the client package's error for an error answer named name
// (wire.ErrorName*) with message msg, and whether nothing was proposed
// (a retry is safe): unavailable and overloaded.
func errorOf(name, msg string) (err error, retry bool) {
	switch name {
	case wire.ErrorNameHeld:
		return client.ErrHeld, false
	case wire.ErrorNameNotFound:
		return client.ErrNotFound, false
	case wire.ErrorNameInvalidArgument:
		return &client.InvalidArgumentError{Reason: msg}, false
	case wire.ErrorNamePermissionDenied:
		return fmt.Errorf("%w: %s", client.ErrPermissionDenied, msg), false
	case wire.ErrorNameOutcomeUnknown:
		return fmt.Errorf("%w: %s", client.ErrOutcomeUnknown, msg), false
	case wire.ErrorNameUnavailable:
		return fmt.Errorf("%w: %s", client.ErrUnavailable, msg), true
	case wire.ErrorNameOverloaded:
		return fmt.Errorf("%w: %s", client.ErrOverloaded, msg), true
	}
	return &client.ServerError{Reason: msg}, false
}

// validate checks a call's arguments before anything is sent, as the
// binary client does, so a call that could never succeed fails as an
// invalid argument, never as an unknown outcome. The key is one the
// cluster may hold, stored before the key rule included (validateAcquire
// checks a new key against the rule).
func validate(key string, lease *time.Duration, owner string) error {
	if err := wire.ValidateStoredKey(key); err != nil {
		return &client.InvalidArgumentError{Reason: err.Error()}
	}
	if lease != nil {
		if err := wire.ValidateLease(lease.Milliseconds()); err != nil {
			return &client.InvalidArgumentError{Reason: err.Error()}
		}
	}
	if err := wire.ValidateOwner(owner); err != nil {
		return &client.InvalidArgumentError{Reason: err.Error()}
	}
	return nil
}

// validateAcquire checks an acquire's arguments, its key against the key
// rule (wire.ValidateKey).
func validateAcquire(r client.AcquireRequest) error {
	if err := validate(r.Key, &r.Lease, r.Owner); err != nil {
		return err
	}
	if err := wire.ValidateKey(r.Key); err != nil {
		return &client.InvalidArgumentError{Reason: err.Error()}
	}
	return nil
}

// validateList checks a list's options as the binary client does.
func validateList(o client.ListOptions) error {
	if len(o.Prefix) > wire.MaxKeyLen || len(o.After) > wire.MaxKeyLen {
		return &client.InvalidArgumentError{Reason: fmt.Sprintf("prefix and after must be at most %d bytes", wire.MaxKeyLen)}
	}
	if o.Limit < 0 || o.Limit > 1000 {
		return &client.InvalidArgumentError{Reason: fmt.Sprintf("limit must be 1..1000, got %d", o.Limit)}
	}
	return nil
}

// The protocols a member speaks, as raftlock chaos --protocols and
// raftlock bench --protocol name them: its client port's binary protocol
// (package client) and its API port's gRPC (NewGRPC) and HTTP/JSON
// (NewHTTP).
const (
	ProtocolBinary = "binary"
	ProtocolGRPC   = "grpc"
	ProtocolHTTP   = "http"
)

// Protocols lists the protocols' names in the order help texts give them.
func Protocols() []string { return []string{ProtocolBinary, ProtocolGRPC, ProtocolHTTP} }

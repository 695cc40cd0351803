package server

import (
	"context"
	"fmt"
	"sync"

	"github.com/raftlock/raftlock/node"
)

// Limit names one thing a client identity holds a share of on this
// member: Limits.MaxConnsPerIdentity and its siblings bound each.
type Limit int

const (
	// LimitConns counts greeted client-port connections.
	LimitConns Limit = iota
	// LimitCalls counts calls in flight over every API (binary, HTTP,
	// gRPC), waiting acquires and gRPC KeepAlive streams included.
	LimitCalls
	// LimitWatches counts open watches over every API.
	LimitWatches
	numLimits
)

// limitInfo names a Limit in errors, in metrics and by its flag.
var limitInfo = [numLimits]struct{ what, label, flag string }{
	LimitConns:   {"client connections", "connections", "--max-connections-per-identity"},
	LimitCalls:   {"calls in flight", "calls", "--max-calls-per-identity"},
	LimitWatches: {"watches open", "watches", "--max-watches-per-identity"},
}

// quota is what each client identity holds on this member, so that none
// takes more than its share of what all of them share (the connection
// cap, the call slots, the member's waiters on a key). It counts only
// identities: without TLS every client is "", and a member without
// certificates listens on loopback only (or with --insecure), where its
// clients are one party.
type quota struct {
	mu      sync.Mutex
	held    map[string]*[numLimits]int
	waiters map[identityKey]int // waiting acquires by identity and key
}

type identityKey struct{ who, key string }

func (l Limits) perIdentity(k Limit) int {
	switch k {
	case LimitConns:
		return l.MaxConnsPerIdentity
	case LimitCalls:
		return l.MaxCallsPerIdentity
	case LimitWatches:
		return l.MaxWatchesPerIdentity
	}
	return 0
}

// IdentityLimitError is the refusal of a call, watch or connection
// because its identity holds its share already. It wraps
// node.ErrOverloaded: the client may try again once it holds less.
type IdentityLimitError struct {
	Identity string
	Held     int
	Limit    int
	What     string // "calls in flight", ...
	Flag     string // the member flag that sets Limit
}

func (e *IdentityLimitError) Error() string {
	return fmt.Sprintf("%v: identity %q has %d %s on this member (limit %d, %s)", node.ErrOverloaded, e.Identity, e.Held, e.What, e.Limit, e.Flag)
}

func (e *IdentityLimitError) Unwrap() error { return node.ErrOverloaded }

// Admit takes one unit of k for the identity who, or refuses it with an
// *IdentityLimitError when who holds its share already. release gives
// the unit back; call it exactly once. The anonymous identity "" (no TLS)
// is never limited here. Every API takes its calls, streams and watches
// through Admit (Do and Watch do), so one identity's share is one
// budget whatever protocols it spreads over.
func (s *Server) Admit(who string, k Limit) (release func(), err error) {
	if who == "" {
		return func() {}, nil
	}
	max := s.limits().perIdentity(k)
	q := &s.quota
	q.mu.Lock()
	if q.held == nil {
		q.held = map[string]*[numLimits]int{}
	}
	h := q.held[who]
	if h == nil {
		h = new([numLimits]int)
		q.held[who] = h
	}
	if h[k] >= max {
		held := h[k]
		q.mu.Unlock()
		info := limitInfo[k]
		s.node.Metrics().IdentityRefusals.WithLabelValues(info.label).Inc()
		return nil, &IdentityLimitError{Identity: who, Held: held, Limit: max, What: info.what, Flag: info.flag}
	}
	h[k]++
	q.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			h[k]--
			if *h == ([numLimits]int{}) {
				delete(q.held, who)
			}
		})
	}, nil
}

// admitWaiter takes one of the waiting acquires who may have on key: a
// fair share of the member's queue for one key (node's MaxWaitersPerKey),
// so that one identity cannot fill a queue others wait in.
func (s *Server) admitWaiter(who, key string) (release func(), err error) {
	if who == "" {
		return func() {}, nil
	}
	max := s.limits().MaxWaitersPerKeyPerIdentity
	q := &s.quota
	k := identityKey{who, key}
	q.mu.Lock()
	if q.waiters == nil {
		q.waiters = map[identityKey]int{}
	}
	if n := q.waiters[k]; n >= max {
		q.mu.Unlock()
		s.node.Metrics().IdentityRefusals.WithLabelValues("waiters_per_key").Inc()
		return nil, &IdentityLimitError{Identity: who, Held: n, Limit: max,
			What: fmt.Sprintf("waiting acquires of %q", key), Flag: "--max-waiters-per-key-per-identity"}
	}
	q.waiters[k]++
	q.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.waiters[k]--; q.waiters[k] <= 0 {
				delete(q.waiters, k)
			}
		})
	}, nil
}

// callUnitKey marks a context whose caller holds a LimitCalls unit for
// the calls it runs (WithCallUnit).
type callUnitKey struct{}

// WithCallUnit is ctx for calls whose caller already holds a unit of its
// identity's calls in flight (Admit with LimitCalls), which Do then does
// not take again: a gRPC KeepAlive holds one for its whole life, and its
// renewals run on it, or an identity whose share is all keep-alives could
// renew none of them.
func WithCallUnit(ctx context.Context) context.Context {
	return context.WithValue(ctx, callUnitKey{}, true)
}

func holdsCallUnit(ctx context.Context) bool {
	held, _ := ctx.Value(callUnitKey{}).(bool)
	return held
}

// Package retry is what raftlock's Go clients (package client's binary
// one and package apiclient's) share about retrying a call: where to send
// it next (Targets: the known leader, else the endpoints in turn) and how
// long to wait before (Jitter).
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Jitter draws a retry delay between d/2 and d. Without it, every client
// that lost the leader at the same moment (an election, a member killed)
// retries in lockstep, 10, 20, 40 ms later, and the new leader meets each
// wave at once; spreading the waits spreads the load, and the half kept
// fixed still lets the cluster settle before the next try.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Targets picks the member a call goes to: the leader once a redirect
// named it, else the endpoints in turn. It is safe for concurrent use.
type Targets struct {
	endpoints []string // not empty

	mu     sync.Mutex
	leader string
	next   int
}

// NewTargets picks among endpoints, trimmed of spaces, the empty ones
// left out; an error when none is left.
func NewTargets(endpoints []string) (*Targets, error) {
	var eps []string
	for _, e := range endpoints {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("raftlock: no endpoints")
	}
	return &Targets{endpoints: eps}, nil
}

// Endpoints are the endpoints it picks among.
func (t *Targets) Endpoints() []string { return t.endpoints }

// Next is where to send: the known leader, else the next endpoint after
// failed, the one that just failed ("" for a first try).
func (t *Targets) Next(failed string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leader != "" && t.leader != failed {
		return t.leader
	}
	ep := t.endpoints[t.next%len(t.endpoints)]
	t.next++
	if ep == failed && len(t.endpoints) > 1 {
		ep = t.endpoints[t.next%len(t.endpoints)]
		t.next++
	}
	return ep
}

// SetLeader remembers addr as the leader's, as a redirect named it.
func (t *Targets) SetLeader(addr string) {
	t.mu.Lock()
	t.leader = addr
	t.mu.Unlock()
}

// ForgetLeader forgets the leader if it is addr, which just failed.
func (t *Targets) ForgetLeader(addr string) {
	t.mu.Lock()
	if t.leader == addr {
		t.leader = ""
	}
	t.mu.Unlock()
}

// Backoff is the growing wait between a call's tries: 10 ms, doubling
// up to 200 ms, each jittered. Its zero value is ready.
type Backoff struct{ d time.Duration }

// Wait sleeps the next delay, or until ctx ends.
func (b *Backoff) Wait(ctx context.Context) {
	if b.d == 0 {
		b.d = 10 * time.Millisecond
	}
	t := time.NewTimer(Jitter(b.d))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	b.d = min(b.d*2, 200*time.Millisecond)
}

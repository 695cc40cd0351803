package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/member"
)

const (
	// fillClients is how many clients take the held locks at once: as
	// many as the member core puts in one log entry (member.Config
	// MaxBatch), so a round of acquires commits in about one entry.
	fillClients = 1024
	// fillTimeout bounds the fill in simulated time; without faults it
	// takes well under a second.
	fillTimeout = 60 * time.Second
	// arrivalGrain is the grid batched requests arrive on: what reaches a
	// member within one grain is read in one go, as a server reads the
	// requests pipelined on its connections, and proposed together.
	arrivalGrain = int64(time.Millisecond)
	// minHeldKeySize fits heldKey's prefix.
	minHeldKeySize = 16
)

// heldKey is the i-th held lock's key: size bytes, disjoint from the
// workload's keys (k1, k2, ...).
func heldKey(i, size int) string {
	k := fmt.Sprintf("held/%08d/", i)
	return k + strings.Repeat("x", size-len(k))
}

// fill takes Config.Held locks before the workload, through clients like
// the workload's (same request path, same history, same checks), with
// fillClients of them at once and their requests batched on arrival, so a
// table of many thousand locks fills in a fraction of a simulated second.
// No fault is injected meanwhile. It returns when the workload may start:
// 0 when there is nothing to fill.
func (s *sim) fill() int64 {
	if s.cfg.Held == 0 {
		return 0
	}
	start := int64(300 * time.Millisecond) // once a leader could exist
	var fillers []*client
	for i := range min(fillClients, s.cfg.Held) {
		c := s.newFiller(i)
		fillers = append(fillers, c)
	}
	for i := range s.cfg.Held {
		c := fillers[i%len(fillers)]
		c.held = append(c.held, heldKey(i, s.cfg.KeySize))
	}
	for _, c := range fillers {
		s.sch.at(start+int64(c.rng.IntN(10))*int64(time.Millisecond), c.next)
	}
	idle := func() bool {
		for _, c := range fillers {
			if c.busy || len(c.held) > 0 {
				return false
			}
		}
		return true
	}
	s.sch.runUntil(start+int64(fillTimeout), idle)
	for _, c := range fillers {
		s.stats.Held += c.took
	}
	s.stats.FillSeconds = float64(s.sch.now-start) / 1e9
	if s.tr.on() {
		s.tr.printf("filled held=%d of %d in %.3fs", s.stats.Held, s.cfg.Held, s.stats.FillSeconds)
	}
	return s.sch.now
}

// newFiller makes fill client idx: its own random stream (apart from the
// workload clients'), its requests batched on arrival, and it asks first
// the member that last answered it, as a client that follows redirects to
// the leader does.
func (s *sim) newFiller(idx int) *client {
	return &client{s: s, idx: idx, rng: rand.New(rand.NewPCG(s.cfg.Seed^0x66696c6c, uint64(idx)+1)), proc: s.newProc(),
		pref: uint64(idx%s.cfg.Nodes) + 1, lastArrival: map[uint64]int64{}, filler: true}
}

// nextHeld acquires the filler's next held key. A lock that did not come
// (unavailable, outcome unknown) is asked for again; one found held was
// taken by an attempt whose answer was lost.
func (c *client) nextHeld() {
	key := c.held[0]
	c.busy = true
	req := member.Request{Op: member.OpAcquire, Key: key, Lease: HeldLease}
	c.start(history.OpAcquire, key, req, 5*time.Second,
		history.Value{LeaseMS: history.Ptr(HeldLease.Milliseconds()), WaitMS: history.Ptr[int64](0)},
		func(typ string, a member.Answer) {
			if typ == history.OK || errors.Is(a.Err, member.ErrHeld) {
				c.held = c.held[1:]
				c.took++
			}
			c.next()
		})
}

// arrival is the requests that reach a member within one arrivalGrain.
type arrival struct {
	atts []*attempt
	reqs []member.Request
}

// arriveBatched hands req to n at the first grain boundary at or after at,
// with every other batched request arriving there.
func (s *sim) arriveBatched(n *node, at int64, a *attempt, req member.Request) int64 {
	at = (at + arrivalGrain - 1) / arrivalGrain * arrivalGrain
	b := n.arriving[at]
	if b == nil {
		b = &arrival{}
		if n.arriving == nil {
			n.arriving = map[int64]*arrival{}
		}
		n.arriving[at] = b
		s.sch.at(at, func() {
			delete(n.arriving, at)
			s.arrive(n, b)
		})
	}
	b.atts = append(b.atts, a)
	b.reqs = append(b.reqs, req)
	return at
}

// arrive submits a batch of requests to n in one input.
func (s *sim) arrive(n *node, b *arrival) {
	if !n.up() {
		for _, a := range b.atts {
			s.sch.after(s.baseLatency(), func() { a.c.refused(a) })
		}
		return
	}
	for _, a := range b.atts {
		n.handles[a.handle] = a
	}
	s.input(n, input{kind: inSubmits, reqs: b.reqs})
}

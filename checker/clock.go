package checker

import (
	"sort"

	"github.com/raftlock/raftlock/checker/history"
)

// clockModel bounds how far any member's clock may have advanced over a
// stretch of harness time, from the history's clock events. A member's
// clock (clock.Skew) runs at a rate and may jump: Set(rate, offset)
// changes the rate from then on and adds offset to the reading; a negative
// offset is absorbed (the clock stands still), so only forward jumps can
// make a lease end early. A member restarted after a kill runs a normal
// clock. Members the history never names run at rate 1, so outside every
// clock fault the bound is the harness time itself and lease timing is
// decided exactly.
//
// The harness applies a fault and then records it, one nemesis action at a
// time, so a change recorded at t took effect after the nemesis event before
// it: over that stretch the model assumes the faster of the old and new
// rates, and a jump counts for any interval that meets it.
type clockModel struct {
	members map[int]*memberClock
	ids     []int // sorted, for a deterministic scan
}

// memberClock is one member's rate as a step function of harness time:
// rates[i] holds from starts[i] until starts[i+1]; before starts[0] the
// rate is 1. cum[i] is the local advance from starts[0] to starts[i].
type memberClock struct {
	starts []int64
	rates  []float64
	cum    []float64
	jumps  []clockJump
}

// clockJump is a forward step of ms, taken at some time in (from, to].
type clockJump struct {
	from, to int64
	ms       int64
}

// newClockModel reads the clock, kill and start events of a history.
func newClockModel(events []history.Event) *clockModel {
	m := &clockModel{members: map[int]*memberClock{}}
	rate := map[int]float64{}
	var prev int64 // time of the nemesis event before the current one
	member := func(id int) *memberClock {
		c, ok := m.members[id]
		if !ok {
			c = &memberClock{}
			m.members[id] = c
			m.ids = append(m.ids, id)
			rate[id] = 1
		}
		return c
	}
	for i := range events {
		e := &events[i]
		if e.Process != history.Nemesis {
			continue
		}
		switch e.F {
		case history.FaultClock:
			id := deref(e.Value.Node)
			c := member(id)
			r := deref(e.Value.Rate)
			c.step(prev, max(rate[id], r))
			c.step(e.Time, r)
			rate[id] = r
			if off := deref(e.Value.OffsetMS); off > 0 {
				c.jumps = append(c.jumps, clockJump{from: prev, to: e.Time, ms: off})
			}
		case history.FaultStart:
			for _, id := range e.Value.Nodes {
				if c, ok := m.members[id]; ok && rate[id] != 1 {
					c.step(e.Time, 1)
					rate[id] = 1
				}
			}
		}
		prev = e.Time
	}
	sort.Ints(m.ids)
	for _, c := range m.members {
		c.cum = make([]float64, len(c.starts))
		for i := 1; i < len(c.starts); i++ {
			c.cum[i] = c.cum[i-1] + float64(c.starts[i]-c.starts[i-1])*c.rates[i-1]
		}
	}
	return m
}

// step sets the rate from t on. Steps arrive in time order; a step at the
// time of the last one keeps the faster rate of the two.
func (c *memberClock) step(t int64, rate float64) {
	if n := len(c.starts); n > 0 && t <= c.starts[n-1] {
		c.rates[n-1] = max(c.rates[n-1], rate)
		return
	}
	c.starts = append(c.starts, t)
	c.rates = append(c.rates, rate)
}

// at is the clock's reading at harness time t, jumps aside.
func (c *memberClock) at(t int64) float64 {
	if len(c.starts) == 0 || t < c.starts[0] {
		return float64(t)
	}
	i := sort.Search(len(c.starts), func(i int) bool { return c.starts[i] > t }) - 1
	return float64(c.starts[0]) + c.cum[i] + float64(t-c.starts[i])*c.rates[i]
}

// advance is the most this clock can have advanced between a and b.
func (c *memberClock) advance(a, b int64) float64 {
	d := c.at(b) - c.at(a)
	for _, j := range c.jumps {
		if j.from < b && j.to >= a {
			d += float64(j.ms) * 1e6
		}
	}
	return d
}

// maxAdvance is the most any member's clock can have advanced, in ns of its
// own time, between harness times a and b; and whether a clock fault made
// that more than b-a.
func (m *clockModel) maxAdvance(a, b int64) (float64, bool) {
	if b <= a {
		return 0, false
	}
	best := float64(b - a)
	faulty := false
	for _, id := range m.ids {
		if d := m.members[id].advance(a, b); d > best {
			best, faulty = d, true
		}
	}
	return best, faulty
}

// faulted says whether the history has any clock fault at all.
func (m *clockModel) faulted() bool {
	for _, c := range m.members {
		if len(c.jumps) > 0 {
			return true
		}
		for _, r := range c.rates {
			if r != 1 {
				return true
			}
		}
	}
	return false
}

package sim

// simClock is one member's clock as a function of simulated time, with the
// semantics of clock.Skew (node/clock): it runs at a rate, a change adds an
// offset to the reading, and it never runs backwards (a backward jump makes
// it stand still until its raw reading catches up). A (re)started member gets a true
// clock: rate 1, reading the simulated time, as a machine's monotonic clock.
type simClock struct {
	rate      float64
	anchorSim int64 // simulated time of the last change
	anchorVal int64 // raw reading at the last change
	last      int64 // highest reading handed out
}

func newSimClock(now int64) simClock {
	return simClock{rate: 1, anchorSim: now, anchorVal: now, last: now}
}

func (c *simClock) raw(t int64) int64 {
	return c.anchorVal + int64(float64(t-c.anchorSim)*c.rate)
}

// read is the reading at simulated time t (t never decreases between calls).
func (c *simClock) read(t int64) int64 {
	v := c.raw(t)
	if v < c.last {
		return c.last
	}
	c.last = v
	return v
}

// set changes the rate from t on and adds offset (ns) to the reading, as
// clock.Skew.Set does.
func (c *simClock) set(t int64, rate float64, offset int64) {
	rate = min(max(rate, 0.01), 100)
	c.read(t)
	c.anchorVal = c.raw(t) + offset
	c.anchorSim = t
	c.rate = rate
}

// interval is how much simulated time d of this clock's time takes at its
// rate: the spacing of its ticks, as clock.Skew's ticker spaces them.
func (c *simClock) interval(d int64) int64 {
	return max(1, int64(float64(d)/c.rate))
}

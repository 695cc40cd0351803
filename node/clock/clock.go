// Package clock is a member's source of time: the system clock in
// production and Skew, whose rate and offset the chaos harness changes
// to inject clock faults.
package clock

import (
	"sync"
	"time"
)

// Clock is the node's only source of time: raft ticks and lease deadlines
// both come from it, so a simulator (or the chaos harness's clock faults) can
// replace it.
type Clock interface {
	// Now is a monotonic reading; only differences between readings mean
	// anything.
	Now() time.Duration
	// NewTicker delivers ticks every d of this clock's time.
	NewTicker(d time.Duration) Ticker
}

// Ticker is a source of periodic ticks.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// System reads the process's monotonic clock.
type System struct{ start time.Time }

// NewSystem returns a clock that starts at zero now.
func NewSystem() *System { return &System{start: time.Now()} }

// Now implements Clock.
func (c *System) Now() time.Duration { return time.Since(c.start) }

// NewTicker implements Clock.
func (c *System) NewTicker(d time.Duration) Ticker { return stdTicker{time.NewTicker(d)} }

type stdTicker struct{ t *time.Ticker }

func (t stdTicker) C() <-chan time.Time { return t.t.C }
func (t stdTicker) Stop()               { t.t.Stop() }

// Skew is a clock whose rate and offset can be changed while it runs:
// the fault the chaos harness injects. It stays monotonic: a negative offset
// step is absorbed, never shown as time going backwards.
type Skew struct {
	mu       sync.Mutex
	base     *System
	rate     float64
	anchor   time.Duration // base reading at the last change
	value    time.Duration // skewed reading at the last change
	last     time.Duration // highest reading handed out
	changeCh chan struct{}
}

// NewSkew returns a clock running at rate 1 with no offset.
func NewSkew() *Skew {
	return &Skew{base: NewSystem(), rate: 1, changeCh: make(chan struct{})}
}

// Set changes the rate (clamped to 0.01..100) and adds offset to the reading.
func (c *Skew) Set(rate float64, offset time.Duration) {
	rate = min(max(rate, 0.01), 100)
	c.mu.Lock()
	now := c.base.Now()
	c.value = c.readLocked(now) + offset
	c.anchor = now
	c.rate = rate
	close(c.changeCh)
	c.changeCh = make(chan struct{})
	c.mu.Unlock()
}

// Rate returns the current rate.
func (c *Skew) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

func (c *Skew) readLocked(now time.Duration) time.Duration {
	return c.value + time.Duration(float64(now-c.anchor)*c.rate)
}

// Now implements Clock.
func (c *Skew) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.readLocked(c.base.Now())
	if v < c.last {
		return c.last
	}
	c.last = v
	return v
}

// NewTicker implements Clock: the real interval is d divided by the rate, and
// follows rate changes.
func (c *Skew) NewTicker(d time.Duration) Ticker {
	t := &skewTicker{c: make(chan time.Time, 1), stop: make(chan struct{})}
	go func() {
		for {
			c.mu.Lock()
			interval := time.Duration(float64(d) / c.rate)
			changed := c.changeCh
			c.mu.Unlock()
			timer := time.NewTimer(interval)
			select {
			case <-t.stop:
				timer.Stop()
				return
			case <-changed:
				timer.Stop()
			case now := <-timer.C:
				select {
				case t.c <- now:
				default:
				}
			}
		}
	}()
	return t
}

type skewTicker struct {
	c    chan time.Time
	stop chan struct{}
	once sync.Once
}

func (t *skewTicker) C() <-chan time.Time { return t.c }
func (t *skewTicker) Stop()               { t.once.Do(func() { close(t.stop) }) }

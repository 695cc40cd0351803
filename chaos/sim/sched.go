package sim

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
)

// event is one thing due at a simulated instant. Events at one instant run
// in the order they were scheduled (seq), so the run is a pure function of
// the seed.
type event struct {
	at  int64
	seq uint64
	fn  func()
}

// sched is the one priority queue of the run, a binary heap ordered by
// (at, seq), and the simulated clock it advances.
type sched struct {
	now int64
	seq uint64
	q   []event
}

func (s *sched) less(i, j int) bool {
	a, b := &s.q[i], &s.q[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

// at schedules fn at simulated time t (never before now).
func (s *sched) at(t int64, fn func()) {
	t = max(t, s.now)
	s.seq++
	s.q = append(s.q, event{at: t, seq: s.seq, fn: fn})
	i := len(s.q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s.q[i], s.q[p] = s.q[p], s.q[i]
		i = p
	}
}

// after schedules fn d nanoseconds from now.
func (s *sched) after(d int64, fn func()) { s.at(s.now+d, fn) }

// pop removes the earliest event; ok is false when none is left.
func (s *sched) pop() (event, bool) {
	if len(s.q) == 0 {
		return event{}, false
	}
	top := s.q[0]
	n := len(s.q) - 1
	s.q[0] = s.q[n]
	s.q[n] = event{}
	s.q = s.q[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s.q[i], s.q[m] = s.q[m], s.q[i]
		i = m
	}
	return top, true
}

// runUntil runs events due up to t (inclusive), or until stop returns true
// after an event; the clock ends at t unless stopped earlier.
func (s *sched) runUntil(t int64, stop func() bool) {
	for len(s.q) > 0 && s.q[0].at <= t {
		e, _ := s.pop()
		s.now = e.at
		e.fn()
		if stop != nil && stop() {
			return
		}
	}
	s.now = max(s.now, t)
}

// tracer writes trace.log: one line per simulated event, prefixed with the
// simulated time in seconds. A nil tracer writes nothing; callers test on()
// before building a line, so a run without a trace allocates nothing for it.
type tracer struct {
	w   *bufio.Writer
	s   *sched
	buf []byte
}

func newTracer(w io.Writer, s *sched) *tracer {
	if w == nil {
		return nil
	}
	return &tracer{w: bufio.NewWriterSize(w, 64<<10), s: s}
}

func (t *tracer) on() bool { return t != nil }

func (t *tracer) printf(format string, args ...any) {
	if t == nil {
		return
	}
	b := t.buf[:0]
	now := t.s.now
	b = strconv.AppendInt(b, now/1e9, 10)
	b = append(b, '.')
	frac := strconv.AppendInt(nil, 1e9+now%1e9, 10)
	b = append(b, frac[1:]...)
	b = append(b, ' ')
	b = fmt.Appendf(b, format, args...)
	b = append(b, '\n')
	t.w.Write(b)
	t.buf = b
}

func (t *tracer) flush() error {
	if t == nil {
		return nil
	}
	return t.w.Flush()
}

// seededReader is the io.Reader installed as crypto/rand.Reader for a run:
// raft draws its randomized election timeouts from it.
type seededReader struct{ r *rand.Rand }

func (s seededReader) Read(p []byte) (int, error) {
	for i := 0; i < len(p); i += 8 {
		v := s.r.Uint64()
		for j := 0; j < 8 && i+j < len(p); j++ {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	return len(p), nil
}

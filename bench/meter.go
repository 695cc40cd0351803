package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// meter counts the clients' operations while the measured window is open:
// one latency and one wait histogram per client, merged at the end.
type meter struct {
	measuring   atomic.Bool
	ops, errs   atomic.Int64
	lastErr     atomic.Pointer[string] // for the progress line: why ops fail
	hists, wait []*Histogram
	// calling is when each closed-loop client's call began (unix nanos,
	// 0 between calls): a call the client keeps retrying (a member
	// answering overloaded, a cluster with no leader) is neither an op
	// nor an error until it ends, and the progress line must not read as
	// an idle cluster.
	calling []atomic.Int64
}

func newMeter(clients int) *meter {
	m := &meter{hists: make([]*Histogram, clients), wait: make([]*Histogram, clients), calling: make([]atomic.Int64, clients)}
	for i := range m.hists {
		m.hists[i], m.wait[i] = NewHistogram(), NewHistogram()
	}
	return m
}

// record counts client i's operation, if the window is open.
func (m *meter) record(i int, lat, wait time.Duration, err error) {
	if !m.measuring.Load() {
		return
	}
	if err != nil {
		m.errs.Add(1)
		msg := err.Error()
		m.lastErr.Store(&msg)
		return
	}
	m.ops.Add(1)
	m.hists[i].Record(lat)
	m.wait[i].Record(wait)
}

// window opens the measured window for spec.Duration (or until ctx ends),
// printing a progress line every 2 s, and returns its length.
func (m *meter) window(ctx context.Context, spec Spec, system string, progress io.Writer) time.Duration {
	m.measuring.Store(true)
	defer m.measuring.Store(false)
	start := time.Now()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	deadline := time.NewTimer(spec.Duration)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-deadline.C:
			return time.Since(start)
		case <-tick.C:
			if progress != nil {
				el := time.Since(start).Seconds()
				failed := ""
				if n, msg := m.errs.Load(), m.lastErr.Load(); n > 0 && msg != nil {
					failed = fmt.Sprintf(", %d failed (last: %s)", n, *msg)
				}
				if n := m.slowCalls(time.Now(), time.Second); n > 0 {
					failed += fmt.Sprintf(", %s unanswered for over 1s (retried: overloaded or no leader?)", countOf(n, "call", "calls"))
				}
				fmt.Fprintf(progress, "bench: %-11s %-11s c=%-4d %4.0fs/%v %8d ops %9.0f ops/s%s\n",
					system, spec.Workload, spec.Clients, el, spec.Duration, m.ops.Load(), float64(m.ops.Load())/el, failed)
			}
		}
	}
}

// slowCalls counts the calls under way for longer than d at now.
func (m *meter) slowCalls(now time.Time, d time.Duration) int {
	n := 0
	for i := range m.calling {
		if t := m.calling[i].Load(); t != 0 && now.Sub(time.Unix(0, t)) > d {
			n++
		}
	}
	return n
}

// result is the window's run: throughput, latency and, contended, waits.
func (m *meter) result(system string, spec Spec, elapsed time.Duration) Run {
	h, w := NewHistogram(), NewHistogram()
	for i := range m.hists {
		h.Merge(m.hists[i])
		w.Merge(m.wait[i])
	}
	r := Run{System: system, Workload: spec.Workload, Clients: spec.Clients, Rate: spec.Rate, KeySize: spec.KeySize,
		ThroughputOpsS: float64(m.ops.Load()) / elapsed.Seconds(), Latency: h.Summary(),
		Ops: m.ops.Load(), Errors: m.errs.Load(), hist: h}
	if spec.Workload == Contended {
		ws := w.Summary()
		r.WaitUS = &ws
	}
	return r
}

// Package bench is raftlock's load generator: closed- and open-loop clients
// running lock workloads against raftlock and, side by side, etcd and Redis;
// HDR latency histograms; the physical floor (fsync, loopback round trip);
// CPU per operation; and the result writer (JSON, Markdown, plots).
package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram records latencies from 1µs to 1 minute with 3 significant
// digits.
type Histogram struct{ h *hdrhistogram.Histogram }

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{h: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)}
}

// Record adds one latency (clamped into the histogram's range).
func (h *Histogram) Record(d time.Duration) {
	us := max(d.Microseconds(), 1)
	h.h.RecordValue(min(us, h.h.HighestTrackableValue()))
}

// Merge adds o's samples.
func (h *Histogram) Merge(o *Histogram) { h.h.Merge(o.h) }

// Count is the number of samples.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// Latency is a summary in microseconds.
type Latency struct {
	P50  int64 `json:"p50"`
	P90  int64 `json:"p90"`
	P99  int64 `json:"p99"`
	P999 int64 `json:"p999"`
	Max  int64 `json:"max"`
}

// Summary returns the percentiles.
func (h *Histogram) Summary() Latency {
	return Latency{P50: h.h.ValueAtQuantile(50), P90: h.h.ValueAtQuantile(90), P99: h.h.ValueAtQuantile(99),
		P999: h.h.ValueAtQuantile(99.9), Max: h.h.Max()}
}

// CDF returns (latency µs, fraction) points for plotting.
func (h *Histogram) CDF() [][2]float64 {
	var pts [][2]float64
	total := float64(h.h.TotalCount())
	if total == 0 {
		return nil
	}
	var seen int64
	for _, b := range h.h.Distribution() {
		if b.Count == 0 {
			continue
		}
		seen += b.Count
		pts = append(pts, [2]float64{float64(b.To), float64(seen) / total})
	}
	return pts
}

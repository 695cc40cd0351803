package bench

import (
	"cmp"
	"slices"
)

// Spread is how repeated runs of one point varied: the lowest and the
// highest of each measure, beside the medians the Run reports.
type Spread struct {
	Repeats        int         `json:"repeats"`
	ThroughputOpsS [2]float64  `json:"throughput_ops_s"`
	P50US          [2]int64    `json:"p50_us"`
	P99US          [2]int64    `json:"p99_us"`
	CPUSPerKop     *[2]float64 `json:"cpu_s_per_kop,omitempty"`
}

// Combine reports repeated runs of one point as one: each measure is the
// median over the runs (the middle one, or the mean of the two middle ones
// for an even count), with the lowest and highest in Spread; ops and
// errors are summed, as are the cluster's events, and the latency histogram (for the CDF plot) holds
// every run's samples. One run is returned as it is.
func Combine(runs []Run) Run {
	if len(runs) == 1 {
		return runs[0]
	}
	if len(runs) == 0 {
		return Run{}
	}
	r := runs[0]
	r.hist = NewHistogram()
	r.Ops, r.Errors = 0, 0
	for _, x := range runs {
		r.Ops += x.Ops
		r.Errors += x.Errors
		if x.hist != nil {
			r.hist.Merge(x.hist)
		}
	}
	sp := &Spread{Repeats: len(runs)}
	r.ThroughputOpsS, sp.ThroughputOpsS = medianOf(runs, func(x Run) float64 { return x.ThroughputOpsS })
	r.Latency.P50, sp.P50US = medianInt(runs, func(x Run) int64 { return x.Latency.P50 })
	r.Latency.P90, _ = medianInt(runs, func(x Run) int64 { return x.Latency.P90 })
	r.Latency.P99, sp.P99US = medianInt(runs, func(x Run) int64 { return x.Latency.P99 })
	r.Latency.P999, _ = medianInt(runs, func(x Run) int64 { return x.Latency.P999 })
	r.Latency.Max, _ = medianInt(runs, func(x Run) int64 { return x.Latency.Max })
	if m, rng, ok := medianOpt(runs, func(x Run) *float64 { return x.CPUSPerKop }); ok {
		r.CPUSPerKop, sp.CPUSPerKop = &m, &rng
	}
	if m, _, ok := medianOpt(runs, func(x Run) *float64 { return x.EntriesPerFsync }); ok {
		r.EntriesPerFsync = &m
	}
	if m, _, ok := medianOpt(runs, func(x Run) *float64 { return x.CommandsPerEntry }); ok {
		r.CommandsPerEntry = &m
	}
	r.Events = nil
	for _, x := range runs {
		if x.Events == nil {
			continue
		}
		var sum ClusterEvents
		if r.Events != nil {
			sum = *r.Events
		}
		sum = sum.plus(*x.Events, 1)
		r.Events = &sum
	}
	if runs[0].WaitUS != nil {
		w := *runs[0].WaitUS
		w.P50, _ = medianInt(runs, func(x Run) int64 { return waitOf(x).P50 })
		w.P99, _ = medianInt(runs, func(x Run) int64 { return waitOf(x).P99 })
		r.WaitUS = &w
	}
	r.Spread = sp
	return r
}

func waitOf(x Run) Latency {
	if x.WaitUS == nil {
		return Latency{}
	}
	return *x.WaitUS
}

// middle returns the median of vs (sorted in place) and its extremes.
func middle[T cmp.Ordered](vs []T, mean func(a, b T) T) (T, [2]T) {
	slices.Sort(vs)
	n := len(vs)
	m := vs[n/2]
	if n%2 == 0 {
		m = mean(vs[n/2-1], vs[n/2])
	}
	return m, [2]T{vs[0], vs[n-1]}
}

func medianOf(runs []Run, get func(Run) float64) (float64, [2]float64) {
	vs := make([]float64, len(runs))
	for i, x := range runs {
		vs[i] = get(x)
	}
	return middle(vs, func(a, b float64) float64 { return (a + b) / 2 })
}

func medianInt(runs []Run, get func(Run) int64) (int64, [2]int64) {
	vs := make([]int64, len(runs))
	for i, x := range runs {
		vs[i] = get(x)
	}
	return middle(vs, func(a, b int64) int64 { return (a + b + 1) / 2 })
}

// medianOpt is the median of a measure some runs may lack (CPU when the
// processes are unknown); ok is false when every run lacks it.
func medianOpt(runs []Run, get func(Run) *float64) (float64, [2]float64, bool) {
	var vs []float64
	for _, x := range runs {
		if v := get(x); v != nil {
			vs = append(vs, *v)
		}
	}
	if len(vs) == 0 {
		return 0, [2]float64{}, false
	}
	m, rng := middle(vs, func(a, b float64) float64 { return (a + b) / 2 })
	return m, rng, true
}

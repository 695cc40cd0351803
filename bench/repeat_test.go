package bench

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

func run(tput float64, p50, p99 int64, cpu float64) Run {
	h := NewHistogram()
	h.Record(time.Duration(p50) * time.Microsecond)
	c, e := cpu, 20.0
	return Run{System: "raftlock", Workload: Uncontended, Clients: 64, ThroughputOpsS: tput,
		Latency: Latency{P50: p50, P90: p50, P99: p99, P999: p99, Max: p99}, CPUSPerKop: &c, CommandsPerEntry: &e,
		Ops: 100, Errors: 1, hist: h}
}

// Repeats report the median of each measure with its lowest and highest;
// ops, errors and the cluster's events add up; one run is left as it is.
func TestCombineReportsMedianAndRange(t *testing.T) {
	r := Combine([]Run{run(7000, 900, 9000, 0.2), run(8000, 800, 20000, 0.1), run(6000, 1000, 8000, 0.3)})
	if r.ThroughputOpsS != 7000 || r.Latency.P50 != 900 || r.Latency.P99 != 9000 || *r.CPUSPerKop != 0.2 {
		t.Errorf("medians: %.0f ops/s, p50 %d, p99 %d, cpu %.1f; want 7000, 900, 9000, 0.2",
			r.ThroughputOpsS, r.Latency.P50, r.Latency.P99, *r.CPUSPerKop)
	}
	sp := r.Spread
	if sp == nil || sp.Repeats != 3 || sp.ThroughputOpsS != [2]float64{6000, 8000} || sp.P99US != [2]int64{8000, 20000} || *sp.CPUSPerKop != [2]float64{0.1, 0.3} {
		t.Fatalf("spread %+v", sp)
	}
	if r.Ops != 300 || r.Errors != 3 || r.hist.Count() != 3 {
		t.Errorf("ops %d, errors %d, samples %d; want 300, 3, 3", r.Ops, r.Errors, r.hist.Count())
	}
	withEvents := func(r Run, gc float64) Run {
		r.Events = &ClusterEvents{GCCycles: gc, Snapshots: 1, SnapshotSeconds: 0.5}
		return r
	}
	ev := Combine([]Run{withEvents(run(7000, 900, 9000, 0.2), 2), run(8000, 800, 20000, 0.1), withEvents(run(6000, 1000, 8000, 0.3), 3)}).Events
	if ev == nil || *ev != (ClusterEvents{GCCycles: 5, Snapshots: 2, SnapshotSeconds: 1}) {
		t.Errorf("cluster events %+v; want the repeats' sum: 5 collections, 2 snapshots, 1 s", ev)
	}
	if even := Combine([]Run{run(7000, 900, 9000, 0.2), run(8000, 800, 20000, 0.1)}); even.ThroughputOpsS != 7500 || even.Latency.P50 != 850 {
		t.Errorf("even count: %.0f ops/s, p50 %d; want the middle pair's mean 7500, 850", even.ThroughputOpsS, even.Latency.P50)
	}
	if one := Combine([]Run{run(7000, 900, 9000, 0.2)}); one.Spread != nil || one.ThroughputOpsS != 7000 {
		t.Errorf("one run: %+v", one)
	}
}

// The table, the Markdown and the JSON all count ops (never cycles), show
// commands per entry, and with repeats the range next to each median.
func TestReportOneUnitAndSpread(t *testing.T) {
	rep := &Report{Runs: []Run{Combine([]Run{run(7000, 900, 9000, 0.2), run(8000, 800, 20000, 0.1), run(6000, 1000, 8000, 0.3)})}}
	var tab, md bytes.Buffer
	rep.Table(&tab)
	rep.Markdown(&md)
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"table": tab.String(), "markdown": md.String(), "json": string(js)} {
		if regexp.MustCompile(`cycles/s|cycles / s|/ 1k cycles|per_kcycle`).MatchString(out) {
			t.Errorf("%s counts cycles where the rest counts ops:\n%s", name, out)
		}
	}
	for _, want := range []string{"ops/s", "cmd/entry", "20.0", "7000 (6000-8000)", "9000 (8000-20000)", "run 3 times"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	if !strings.Contains(md.String(), "7000 (6000-8000)") || !strings.Contains(string(js), `"spread":{"repeats":3`) {
		t.Errorf("markdown or JSON lacks the spread:\n%s\n%s", md.String(), js)
	}
}

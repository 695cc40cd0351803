package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node/nodetest"
)

func TestHistogramPercentiles(t *testing.T) {
	h := NewHistogram()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	s := h.Summary()
	if s.P50 < 495 || s.P50 > 505 || s.P99 < 985 || s.P99 > 995 || s.Max < 999 || s.Max > 1001 {
		t.Fatalf("summary %+v", s)
	}
	o := NewHistogram()
	o.Record(time.Second)
	h.Merge(o)
	if h.Count() != 1001 || h.Summary().Max < 999_000 {
		t.Fatalf("after merge: count %d, %+v", h.Count(), h.Summary())
	}
	cdf := h.CDF()
	if len(cdf) == 0 || cdf[len(cdf)-1][1] != 1 {
		t.Fatalf("cdf does not end at 1: %v", cdf[len(cdf)-1])
	}
	h.Record(-time.Second) // clamped, not a panic
}

func TestReportWriter(t *testing.T) {
	v := 0.5
	h := NewHistogram()
	h.Record(time.Millisecond)
	rep := &Report{Floor: Floor{FsyncUS: 150, RTTUS: 16}, Runs: []Run{
		{System: "raftlock", Workload: Uncontended, Clients: 1, ThroughputOpsS: 100, Latency: h.Summary(), CPUSPerKop: &v, hist: h},
		{System: "raftlock", Workload: Uncontended, Clients: 64, ThroughputOpsS: 1000, Latency: h.Summary(), hist: h},
	}}
	dir, b := written(t, rep, "bench.json")
	var back struct {
		Floor map[string]float64           `json:"floor"`
		Runs  []map[string]json.RawMessage `json:"runs"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.Floor["fsync_us"] != 150 || len(back.Runs) != 2 {
		t.Fatalf("bench.json: %s (%v)", b, err)
	}
	for _, f := range []string{"system", "workload", "clients", "throughput_ops_s", "latency_us", "cpu_s_per_kop", "entries_per_fsync"} {
		if _, ok := back.Runs[0][f]; !ok {
			t.Errorf("run lacks %q", f)
		}
	}
	for _, f := range []string{"bench.md", "throughput.png", "latency-cdf-uncontended.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// Open-loop runs only: no throughput curve, and no failure.
	open := &Report{Runs: []Run{{System: "raftlock", Workload: Uncontended, Clients: 64, Rate: 100, Latency: h.Summary(), hist: h}}}
	if err := open.Write(t.TempDir()); err != nil {
		t.Fatalf("open-loop report: %v", err)
	}
	// One client count (the ablations, or an interrupted run): a log axis
	// over a single value used to panic.
	one := &Report{Partial: true, Runs: rep.Runs[:1]}
	if err := one.Write(t.TempDir()); err != nil {
		t.Fatalf("one-point report: %v", err)
	}
	var tab bytes.Buffer
	rep.Table(&tab)
	if !strings.Contains(tab.String(), "raftlock") {
		t.Fatalf("table: %s", tab.String())
	}
}

// A short bench against an in-process cluster: the numbers live in
// results/, this only proves the machinery runs end to end.
func TestBenchSmoke(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	target, err := RaftlockEndpoints(ctx, c.Endpoints(), 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	for _, w := range []string{Uncontended, Contended, Mixed} {
		r, err := Measure(ctx, target, Spec{Workload: w, Clients: 4, Duration: 700 * time.Millisecond, Warmup: 100 * time.Millisecond, HotKeys: 1}, nil)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		if r.Ops == 0 || r.ThroughputOpsS <= 0 || r.Latency.P50 <= 0 {
			t.Fatalf("%s: %+v", w, r)
		}
	}
	r, err := Measure(ctx, target, Spec{Workload: Uncontended, Clients: 4, Rate: 200, Duration: 500 * time.Millisecond}, nil)
	if err != nil || r.Ops == 0 {
		t.Fatalf("open loop: %+v, %v", r, err)
	}
	if _, err := MeasureFloor(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// written writes rep into a new directory, and returns the directory and
// what its file name holds.
func written(t *testing.T, rep *Report, name string) (dir string, content []byte) {
	t.Helper()
	dir = t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return dir, content
}

// A report of bench --held has the held size on every run, a table by
// held size with ratios to the 0-held row, and scale.md and scale.png.
func TestScaleReportWriter(t *testing.T) {
	h := NewHistogram()
	h.Record(2 * time.Millisecond)
	cpu0, cpu1 := 0.02, 0.5
	rep := &Report{Command: "raftlock bench --held 0,1000", FillMode: FillIncremental, Scale: []ScalePoint{
		{Held: 0, IdleLeaderCPU: &cpu0},
		{Held: 1000, Fill: &FillResult{Locks: 1000, RateOpsS: 5000}, IdleLeaderCPU: &cpu1,
			CatchUp: &CatchUpResult{Seconds: 1.5, BySnapshot: true}, Join: &JoinResult{Seconds: 2, BySnapshot: false}},
	}}
	for _, held := range []int{0, 1000} {
		for _, c := range []int{1, 64} {
			rep.Runs = append(rep.Runs, Run{System: "raftlock", Workload: Uncontended, Clients: c, Held: held,
				ThroughputOpsS: float64(1000 * c / (1 + held/1000)), Latency: h.Summary(), hist: h})
		}
	}
	dir, md := written(t, rep, "scale.md")
	for _, want := range []string{"raftlock bench --held 0,1000", "ops/s (c=64)", "| 1000 | 5000 | 32000 |", "25.00x", "2.00 (log, no snapshot)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("scale.md lacks %q:\n%s", want, md)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "scale.png")); err != nil || st.Size() == 0 {
		t.Errorf("scale.png: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "bench.md"))
	if !strings.Contains(string(b), "## By held locks") || !strings.Contains(string(b), "| held |") {
		t.Errorf("bench.md has no table by held size:\n%s", b)
	}
	one := &Report{Scale: rep.Scale[:1], Runs: rep.Runs[:2]}
	if err := one.Write(t.TempDir()); err != nil {
		t.Fatalf("one held size: %v", err)
	}
}

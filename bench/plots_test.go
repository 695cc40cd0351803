package bench

import (
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func runsOf(systems, workloads []string, clients ...int) []Run {
	h := NewHistogram()
	h.Record(time.Millisecond)
	var runs []Run
	for _, s := range systems {
		for _, w := range workloads {
			for _, c := range clients {
				runs = append(runs, Run{System: s, Workload: w, Clients: c, ThroughputOpsS: float64(100 * c), Latency: h.Summary(), hist: h})
			}
		}
	}
	return runs
}

// A system has one colour in every plot of every report, whichever
// systems ran and in whatever order: the colour comes from its name.
func TestSystemColourIsFixed(t *testing.T) {
	one := &Report{Runs: runsOf([]string{"raftlock", "etcd-mutex", "etcd-txn", "redis"}, []string{Uncontended}, 1, 64)}
	other := &Report{Runs: runsOf([]string{"redis", "etcd-txn", "raftlock"}, []string{Contended, Uncontended}, 64)}
	colours := map[string]color.Color{}
	for _, rep := range []*Report{one, other} {
		for _, p := range rep.throughputPanels() {
			for _, l := range p.lines {
				if c, ok := colours[l.name]; ok && c != l.color {
					t.Errorf("%s: colour %v in one throughput panel, %v in another", l.name, l.color, c)
				}
				colours[l.name] = l.color
			}
		}
		for _, x := range rep.Runs {
			if c := rep.seriesColor(x); c != colours[x.System] {
				t.Errorf("%s: CDF colour %v, throughput colour %v", x.System, c, colours[x.System])
			}
		}
	}
	seen := map[color.Color]string{}
	for _, s := range []string{"raftlock", "etcd-mutex", "etcd-txn", "redis"} {
		if o, ok := seen[colours[s]]; ok {
			t.Errorf("%s and %s share a colour", s, o)
		}
		seen[colours[s]] = s
	}
	if systemColor("raftlock --no-batch") != systemColor("raftlock --no-batch") {
		t.Error("an ablation's colour is not fixed")
	}
}

// throughput.png has one panel per closed-loop workload, in the order they
// ran, each with a line per system of that workload's runs only.
func TestThroughputHasOnePanelPerWorkload(t *testing.T) {
	rep := &Report{Runs: runsOf([]string{"raftlock", "redis"}, []string{Uncontended, Contended, Mixed}, 64, 1)}
	rep.Runs[0].ThroughputOpsS = 12345 // raftlock uncontended c=64
	rep.Runs = append(rep.Runs, Run{System: "raftlock", Workload: "open", Clients: 64, Rate: 100})
	panels := rep.throughputPanels()
	var workloads []string
	for _, p := range panels {
		workloads = append(workloads, p.workload)
		if len(p.lines) != 2 || p.lines[0].name != "raftlock" || p.lines[1].name != "redis" {
			t.Errorf("%s: lines %+v, want raftlock and redis", p.workload, p.lines)
			continue
		}
		for _, l := range p.lines {
			if len(l.pts) != 2 || l.pts[0].X != 1 || l.pts[1].X != 64 {
				t.Errorf("%s %s: points %v, want c=1 and c=64 in order", p.workload, l.name, l.pts)
			}
		}
	}
	if want := []string{Uncontended, Contended, Mixed}; !slices.Equal(workloads, want) {
		t.Fatalf("panels %q, want %q", workloads, want)
	}
	if y := panels[0].lines[0].pts[1].Y; y != 12345 {
		t.Errorf("raftlock uncontended c=64 plotted at %v, want 12345", y)
	}
	// A report of bench --held: a line per table size, coloured by size.
	held := &Report{Scale: []ScalePoint{{Held: 0}, {Held: 1000}}}
	for _, n := range []int{1000, 0} {
		for _, x := range runsOf([]string{"raftlock"}, []string{Uncontended}, 1, 64) {
			x.Held = n
			held.Runs = append(held.Runs, x)
		}
	}
	hp := held.throughputPanels()
	if len(hp) != 1 || len(hp[0].lines) != 2 || hp[0].lines[0].color == hp[0].lines[1].color {
		t.Fatalf("held panels %+v: want one panel, a line per size in its own colour", hp)
	}
	if hp[0].lines[1].name != "raftlock held=0" || hp[0].lines[1].color != palette[0] {
		t.Errorf("held=0 line %+v: want the first colour of the sizes, ascending", hp[0].lines[1])
	}
	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"throughput.png", "latency-cdf-uncontended.png", "latency-cdf-contended.png", "latency-cdf-mixed.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

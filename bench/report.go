package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Report is a whole bench invocation.
type Report struct {
	Command string   `json:"command,omitempty"`
	Machine Machine  `json:"machine"`
	Floor   Floor    `json:"floor"`
	Runs    []Run    `json:"runs"`
	Notes   []string `json:"notes,omitempty"`
	// Partial: the invocation was interrupted; Runs holds what was
	// measured before, and a note says where it stopped.
	Partial bool `json:"partial,omitempty"`
}

// Machine facts recorded with results.
type Machine struct {
	CPUs int    `json:"cpus"`
	OS   string `json:"os"`
	Go   string `json:"go"`
}

func opt(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// Table writes the runs as an aligned text table.
func (r *Report) Table(w io.Writer) {
	if r.Partial {
		fmt.Fprintln(w, "PARTIAL: interrupted; only the runs below were measured")
	}
	fmt.Fprintf(w, "floor: fsync %.0fµs, loopback rtt %.0fµs\n", r.Floor.FsyncUS, r.Floor.RTTUS)
	fmt.Fprintf(w, "%-16s %-11s %7s %12s %9s %9s %9s %9s %9s %10s %9s\n", "system", "workload", "clients",
		"cycles/s", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs", "cpu s/kop", "ent/fsync")
	for _, x := range r.Runs {
		fmt.Fprintf(w, "%-16s %-11s %7d %12.0f %9d %9d %9d %9d %9d %10s %9s\n", x.System, x.Workload, x.Clients,
			x.ThroughputOpsS, x.Latency.P50, x.Latency.P90, x.Latency.P99, x.Latency.P999, x.Latency.Max,
			opt(x.CPUSPerKop, "%.3f"), opt(x.EntriesPerFsync, "%.1f"))
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// Markdown writes the report as a Markdown document.
func (r *Report) Markdown(w io.Writer) {
	fmt.Fprintf(w, "# raftlock bench\n\n")
	if r.Partial {
		fmt.Fprintf(w, "**Partial**: the run was interrupted; only the runs below were measured.\n\n")
	}
	if r.Command != "" {
		fmt.Fprintf(w, "Command: `%s`\n\n", r.Command)
	}
	fmt.Fprintf(w, "Machine: %d CPUs, %s, %s. Floor measured in the same run: fsync of a 4 KiB append %.0f µs (median), loopback round trip %.0f µs (median).\n\n",
		r.Machine.CPUs, r.Machine.OS, r.Machine.Go, r.Floor.FsyncUS, r.Floor.RTTUS)
	fmt.Fprintln(w, "One op is one cycle (acquire + release; mixed adds a linearizable get; contended is one handoff).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | workload | clients | cycles/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | CPU s / 1k cycles | entries / fsync | commands / entry | errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.Runs {
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %d | %d | %d | %d | %d | %s | %s | %s | %d |\n", x.System, x.Workload, x.Clients,
			x.ThroughputOpsS, x.Latency.P50, x.Latency.P90, x.Latency.P99, x.Latency.P999, x.Latency.Max,
			opt(x.CPUSPerKop, "%.3f"), opt(x.EntriesPerFsync, "%.1f"), opt(x.CommandsPerEntry, "%.1f"), x.Errors)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\n- %s", n)
	}
	fmt.Fprintln(w)
}

// Write writes bench.json, bench.md, throughput.png (closed-loop runs) and
// one latency-cdf-WORKLOAD.png per workload.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	r.Markdown(&md)
	if err := os.WriteFile(filepath.Join(dir, "bench.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	if err := r.plotThroughput(filepath.Join(dir, "throughput.png")); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, x := range r.Runs {
		if !seen[x.Workload] {
			seen[x.Workload] = true
			if err := r.plotCDF(filepath.Join(dir, "latency-cdf-"+x.Workload+".png"), x.Workload); err != nil {
				return err
			}
		}
	}
	return nil
}

var palette = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255},
	color.RGBA{214, 39, 40, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255},
	color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255},
}

// plotThroughput draws throughput against clients, one line per system and
// workload.
func (r *Report) plotThroughput(path string) error {
	p := plot.New()
	p.Title.Text = "throughput against clients"
	p.X.Label.Text = "clients"
	p.Y.Label.Text = "cycles / s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	series := map[string]plotter.XYs{}
	for _, x := range r.Runs {
		if x.Rate > 0 {
			continue
		}
		name := x.System + " " + x.Workload
		series[name] = append(series[name], plotter.XY{X: float64(x.Clients), Y: x.ThroughputOpsS})
	}
	if len(series) == 0 {
		return nil // open-loop runs only: no closed-loop curve to draw
	}
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		pts := series[n]
		sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, s.Color = palette[i%len(palette)], palette[i%len(palette)]
		p.Add(l, s)
		p.Legend.Add(n, l, s)
	}
	p.Legend.Top, p.Legend.Left = true, true
	if p.X.Min == p.X.Max {
		// One client count: gonum's log axis cannot span a single value.
		p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// plotCDF draws the latency distribution of each run of one workload:
// colour by system, dashes by client count.
func (r *Report) plotCDF(path, workload string) error {
	p := plot.New()
	p.Title.Text = "cycle latency CDF, " + workload
	p.X.Label.Text = "latency (µs, log)"
	p.Y.Label.Text = "fraction of cycles"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	systems, clients := map[string]int{}, map[int]int{}
	for _, x := range r.Runs {
		if _, ok := systems[x.System]; !ok {
			systems[x.System] = len(systems)
		}
		if _, ok := clients[x.Clients]; !ok {
			clients[x.Clients] = len(clients)
		}
	}
	dashes := [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}}
	for _, x := range r.Runs {
		if x.hist == nil || x.Workload != workload {
			continue
		}
		var pts plotter.XYs
		for _, c := range x.hist.CDF() {
			pts = append(pts, plotter.XY{X: max(c[0], 1), Y: c[1]})
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = palette[systems[x.System]%len(palette)]
		l.Dashes = dashes[clients[x.Clients]%len(dashes)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s c=%d", x.System, x.Clients), l)
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

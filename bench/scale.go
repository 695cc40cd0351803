package bench

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ScalePoint is what bench --held measured at one table size besides the
// workload points (the runs whose Held is the same).
type ScalePoint struct {
	Held    int `json:"held"`
	KeySize int `json:"key_size"`
	// Fill is the fill up to Held (from the previous size, when the
	// report's FillMode is incremental).
	Fill *FillResult `json:"fill,omitempty"`
	// SettleSeconds is how long after the fill every member took to apply
	// what the leader had (a cluster the bench started): the workloads at
	// this size start then, so that they measure the table's cost and not
	// the fill's tail.
	SettleSeconds *float64 `json:"settle_seconds,omitempty"`
	// IdleLeaderCPU is the leader's CPU over a few seconds with no load,
	// as a fraction of one core; CatchUp and Join are set when the bench
	// started the cluster and ran them (--catch-up).
	IdleLeaderCPU *float64 `json:"idle_leader_cpu,omitempty"`
	// LeaderRSSBytes is the leader's resident memory after the fill.
	LeaderRSSBytes *uint64        `json:"leader_rss_bytes,omitempty"`
	CatchUp        *CatchUpResult `json:"catch_up,omitempty"`
	Join           *JoinResult    `json:"join,omitempty"`
}

// FillIncremental is the FillMode of a report whose table sizes were
// filled one after the other on one cluster.
const FillIncremental = "incremental"

// scaleRow is one line of the table by held size: the figures the
// scale report compares against the 0-held row.
type scaleRow struct {
	held                    int
	fill, tput, p99, p50    *float64
	idle, catchUp, join     *float64
	rssMiB, perLock, ready  *float64
	tputClients, p50Clients int
	catchUpSnap, joinSnap   bool
}

// headline picks, for each held size, the uncontended point with the
// client count nearest 64 (its throughput and p99) and the one with the
// fewest clients (its p50).
func (r *Report) scaleRows() []scaleRow {
	var rows []scaleRow
	for _, sp := range r.Scale {
		row := scaleRow{held: sp.Held, idle: sp.IdleLeaderCPU}
		if sp.LeaderRSSBytes != nil {
			mib := float64(*sp.LeaderRSSBytes) / (1 << 20)
			row.rssMiB = &mib
		}
		if sp.Fill != nil && sp.Fill.Locks > sp.Fill.From {
			row.fill = &sp.Fill.RateOpsS
		}
		if c := sp.CatchUp; c != nil {
			row.catchUp, row.catchUpSnap = &c.Seconds, c.BySnapshot
			if c.ReadySeconds > 0 {
				row.ready = &c.ReadySeconds
			}
		}
		if j := sp.Join; j != nil {
			row.join, row.joinSnap = &j.Seconds, j.BySnapshot
		}
		var big, small *Run
		for i := range r.Runs {
			x := &r.Runs[i]
			if x.Held != sp.Held || x.Workload != Uncontended || x.Rate > 0 {
				continue
			}
			if big == nil || abs(x.Clients-64) < abs(big.Clients-64) {
				big = x
			}
			if small == nil || x.Clients < small.Clients {
				small = x
			}
		}
		if big != nil {
			p99 := float64(big.Latency.P99)
			row.tput, row.p99, row.tputClients = &big.ThroughputOpsS, &p99, big.Clients
		}
		if small != nil {
			p50 := float64(small.Latency.P50)
			row.p50, row.p50Clients = &p50, small.Clients
		}
		rows = append(rows, row)
	}
	return rows
}

func abs(x int) int { return max(x, -x) }

// ratio formats v against the base row's value: "2.5x".
func ratio(v, base *float64) string {
	if v == nil || base == nil || *base == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *v / *base)
}

// ScaleTable writes the table by held size, in Markdown, with each
// measure's ratio to the 0-held row when there is one.
func (r *Report) ScaleTable(w io.Writer) {
	rows := r.scaleRows()
	if len(rows) == 0 {
		return
	}
	var base *scaleRow
	for i := range rows {
		if rows[i].held == 0 {
			base = &rows[i]
		}
	}
	for i := range rows {
		x := &rows[i]
		if base != nil && base.rssMiB != nil && x.rssMiB != nil && x.held > 0 {
			b := (*x.rssMiB - *base.rssMiB) * (1 << 20) / float64(x.held)
			x.perLock = &b
		}
	}
	tc, pc := rows[0].tputClients, rows[0].p50Clients
	fmt.Fprintf(w, "| held | fill acquires/s | ops/s (c=%d) | p99 µs (c=%d) | p50 µs (c=%d) | idle leader CPU | leader RSS MiB | bytes per lock | restart ready s | catch-up s | join s |", tc, tc, pc)
	if base != nil {
		fmt.Fprint(w, " ops/s vs 0 | p99 vs 0 | p50 vs 0 | idle CPU vs 0 |")
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	if base != nil {
		fmt.Fprint(w, "---:|---:|---:|---:|")
	}
	fmt.Fprintln(w)
	for _, x := range rows {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", x.held, opt(x.fill, "%.0f"), opt(x.tput, "%.0f"), opt(x.p99, "%.0f"),
			opt(x.p50, "%.0f"), opt(x.idle, "%.3f"), opt(x.rssMiB, "%.0f"), opt(x.perLock, "%.0f"), opt(x.ready, "%.2f"),
			snapNote(x.catchUp, x.catchUpSnap), snapNote(x.join, x.joinSnap))
		if base != nil {
			fmt.Fprintf(w, " %s | %s | %s | %s |", ratio(x.tput, base.tput), ratio(x.p99, base.p99), ratio(x.p50, base.p50), ratio(x.idle, base.idle))
		}
		fmt.Fprintln(w)
	}
}

// snapNote is a catch-up or join time, marked when it took no snapshot.
func snapNote(secs *float64, bySnapshot bool) string {
	if secs == nil {
		return "-"
	}
	if !bySnapshot {
		return fmt.Sprintf("%.2f (log, no snapshot)", *secs)
	}
	return fmt.Sprintf("%.2f", *secs)
}

// scaleNotes say how the table was filled and what was measured how.
func (r *Report) scaleNotes() []string {
	notes := []string{"held: locks held (1 h leases) while every point ran; the workloads' keys are as long as the held ones and never among them."}
	if r.FillMode == FillIncremental {
		notes = append(notes, "fill: incremental, each size filled on from the previous one on the same cluster; the rate is that step's, at the fill's client count.")
	}
	notes = append(notes, "idle leader CPU: the leader process's CPU over 15 s with no load after the fill, as a fraction of one core.",
		"leader RSS: the leader process's resident memory (VmRSS) after the fill; bytes per lock: its growth over the 0-held row, per held lock.",
		"restart ready: a follower killed (SIGKILL) with the table, restarted, timed until it answers a status request (its store loaded and its table decoded).",
		"catch-up: that follower, killed while the leader applied past a compaction of its log, timed from its restart until it applied the leader's index.",
		"join: a fourth member added (member.add), started with --join, timed from its start until it applied the leader's index, then removed.",
		"\"(log, no snapshot)\": the member caught up without installing a snapshot.")
	return notes
}

// WriteScale writes scale.md and scale.png into dir.
func (r *Report) WriteScale(dir string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# raftlock against table size\n\n")
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	}
	fmt.Fprintf(&b, "Machine: %d cores, %s, %s; fsync floor of a 4 KiB append %.0f µs (median), loopback round trip %.0f µs.\n\n",
		r.Machine.CPUs, r.Machine.OS, r.Machine.Go, r.Floor.FsyncUS, r.Floor.RTTUS)
	r.ScaleTable(&b)
	fmt.Fprintln(&b)
	for _, n := range r.scaleNotes() {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	fmt.Fprintf(&b, "\n![throughput and p99 against held locks](scale.png)\n")
	if err := os.WriteFile(filepath.Join(dir, "scale.md"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write scale.md: %w", err)
	}
	return r.plotScale(filepath.Join(dir, "scale.png"))
}

// plotScale draws throughput (above) and p99 (below) against held locks,
// one line per workload and client count.
func (r *Report) plotScale(path string) error {
	tput, p99 := plot.New(), plot.New()
	tput.Title.Text = "throughput against held locks"
	tput.Y.Label.Text = "ops / s"
	p99.Title.Text = "p99 latency against held locks"
	p99.Y.Label.Text = "p99 (ms)"
	for _, p := range []*plot.Plot{tput, p99} {
		p.X.Label.Text = "locks held"
	}
	// One legend beside both panels, where it hides no line.
	legend := newLegend()
	series := map[string][2]plotter.XYs{}
	var names []string
	for _, x := range r.Runs {
		if x.Rate > 0 {
			continue
		}
		name := fmt.Sprintf("%s c=%d", x.Workload, x.Clients)
		if _, ok := series[name]; !ok {
			names = append(names, name)
		}
		s := series[name]
		s[0] = append(s[0], plotter.XY{X: float64(x.Held), Y: x.ThroughputOpsS})
		s[1] = append(s[1], plotter.XY{X: float64(x.Held), Y: float64(x.Latency.P99) / 1000})
		series[name] = s
	}
	for i, n := range names {
		for k, p := range []*plot.Plot{tput, p99} {
			slices.SortFunc(series[n][k], func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
			l, pts, err := plotter.NewLinePoints(series[n][k])
			if err != nil {
				return fmt.Errorf("plot %s: %w", n, err)
			}
			l.Color, pts.Color = palette[i%len(palette)], palette[i%len(palette)]
			p.Add(l, pts)
			if k == 0 {
				legend.Add(n, l, pts)
			}
		}
	}
	return saveBeside(path, 8*vg.Inch, 9*vg.Inch, legend, func(dc draw.Canvas) {
		tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter}
		canvases := plot.Align([][]*plot.Plot{{tput}, {p99}}, tiles, dc)
		tput.Draw(canvases[0][0])
		p99.Draw(canvases[1][0])
	})
}

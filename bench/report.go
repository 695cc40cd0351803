package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Report is a whole bench invocation.
type Report struct {
	Command string  `json:"command,omitempty"`
	Machine Machine `json:"machine"`
	Floor   Floor   `json:"floor"`
	// TLS: raftlock's clients spoke mutual TLS 1.3 to the members (and,
	// for a cluster the bench started, the members to each other).
	TLS   bool     `json:"tls"`
	Runs  []Run    `json:"runs"`
	Notes []string `json:"notes,omitempty"`
	// Partial: the invocation was interrupted; Runs holds what was
	// measured before, and a note says where it stopped.
	Partial bool `json:"partial,omitempty"`
	// Scale has, with bench --held, one entry per table size: its fill,
	// idle leader CPU, catch-up and join; FillMode says how the sizes
	// were filled ("incremental": on from the previous size, one cluster).
	Scale    []ScalePoint `json:"scale,omitempty"`
	FillMode string       `json:"fill_mode,omitempty"`
	// Released is how many held locks the bench released when it was
	// done with a cluster it did not start (--endpoints).
	Released *int `json:"released,omitempty"`
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

// withSpread writes a median with its range over repeats: "8065 (7900-8210)".
func withSpread[T int64 | float64](format string, v T, spread *[2]T) string {
	if spread == nil {
		return fmt.Sprintf(format, v)
	}
	return fmt.Sprintf(format+" ("+format+"-"+format+")", v, spread[0], spread[1])
}

// measures formats a run's ops/s, p50 and p99, with their ranges when the
// run was repeated.
func (x *Run) measures() (tput, p50, p99 string) {
	if x.Spread == nil {
		return withSpread("%.0f", x.ThroughputOpsS, nil), withSpread("%d", x.Latency.P50, nil), withSpread("%d", x.Latency.P99, nil)
	}
	return withSpread("%.0f", x.ThroughputOpsS, &x.Spread.ThroughputOpsS), withSpread("%d", x.Latency.P50, &x.Spread.P50US),
		withSpread("%d", x.Latency.P99, &x.Spread.P99US)
}

// opNote says what one op is, in every output that counts them.
const opNote = "One op is one cycle: acquire + release (mixed adds a linearizable get; contended is one handoff)."

// repeatNote says how repeated points are reported, when some were.
func (r *Report) repeatNote() string {
	for _, x := range r.Runs {
		if x.Spread != nil {
			return fmt.Sprintf("Each point was run %d times: medians, with (lowest-highest) over the repeats.", x.Spread.Repeats)
		}
	}
	return ""
}

// Table writes the runs as an aligned text table.
func (r *Report) Table(w io.Writer) {
	if r.Partial {
		fmt.Fprintln(w, "PARTIAL: interrupted; only the runs below were measured")
	}
	fmt.Fprintf(w, "floor: fsync %.0fµs, loopback rtt %.0fµs; raftlock TLS %s\n", r.Floor.FsyncUS, r.Floor.RTTUS, onOff(r.TLS))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Names are padded here, so that only the numbers align right.
	held := r.heldColumn("held\t")
	fmt.Fprintf(tw, "%-16s %-11s\t%sclients\tops/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\tmax µs\tcpu s/kop\tent/fsync\tcmd/entry\t\n", "system", "workload", held(nil))
	for _, x := range r.Runs {
		tput, p50, p99 := x.measures()
		fmt.Fprintf(tw, "%-16s %-11s\t%s%d\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t\n", x.System, x.Workload, held(&x), x.Clients,
			tput, p50, x.Latency.P90, p99, x.Latency.P999, x.Latency.Max,
			opt(x.CPUSPerKop, "%.3f"), opt(x.EntriesPerFsync, "%.1f"), opt(x.CommandsPerEntry, "%.1f"))
	}
	tw.Flush()
	fmt.Fprintln(w, opNote)
	if n := r.repeatNote(); n != "" {
		fmt.Fprintln(w, n)
	}
	if len(r.Scale) > 0 {
		fmt.Fprintln(w, "\nby held locks:")
		r.ScaleTable(w)
	}
	if r.Released != nil {
		fmt.Fprintf(w, "released the %d locks the bench held\n", *r.Released)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// heldColumn returns the formatter of the held column, which only reports
// of bench --held have: header (for nil) or the run's held count in its
// place.
func (r *Report) heldColumn(header string) func(*Run) string {
	if len(r.Scale) == 0 {
		return func(*Run) string { return "" }
	}
	return func(x *Run) string {
		if x == nil {
			return header
		}
		return fmt.Sprintf("%d%s", x.Held, strings.TrimPrefix(header, "held"))
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
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
	if r.TLS {
		fmt.Fprintf(w, "TLS: on. raftlock's clients and members spoke mutual TLS 1.3 (peers compared, if any, ran without TLS).\n\n")
	} else {
		fmt.Fprintf(w, "TLS: off (plain TCP on loopback).\n\n")
	}
	fmt.Fprintln(w, opNote)
	if n := r.repeatNote(); n != "" {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w)
	held := r.heldColumn("held | ")
	fmt.Fprintf(w, "| system | workload | %sclients | ops/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | CPU s / 1k ops | entries / fsync | commands / entry | errors |\n", held(nil))
	fmt.Fprintf(w, "|---|---|%s---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", strings.Repeat("---:|", min(len(r.Scale), 1)))
	for _, x := range r.Runs {
		tput, p50, p99 := x.measures()
		fmt.Fprintf(w, "| %s | %s | %s%d | %s | %s | %d | %s | %d | %d | %s | %s | %s | %d |\n", x.System, x.Workload, held(&x), x.Clients,
			tput, p50, x.Latency.P90, p99, x.Latency.P999, x.Latency.Max,
			opt(x.CPUSPerKop, "%.3f"), opt(x.EntriesPerFsync, "%.1f"), opt(x.CommandsPerEntry, "%.1f"), x.Errors)
	}
	if len(r.Scale) > 0 {
		fmt.Fprintf(w, "\n## By held locks\n\n")
		r.ScaleTable(w)
		fmt.Fprintln(w)
		for _, n := range r.scaleNotes() {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	if r.Released != nil {
		fmt.Fprintf(w, "\nReleased the %d locks the bench held.\n", *r.Released)
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
	if len(r.Scale) > 1 {
		if err := r.WriteScale(dir); err != nil {
			return err
		}
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

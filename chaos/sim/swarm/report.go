// Package swarm runs the simulator the way raftlock sim does: one seed
// checked and its report written, a failing run shrunk to the smallest
// that still fails, and swarms of seeds, each in a child process.
package swarm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/sim"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/reportdir"
)

// SeedReport is one seed's outcome: sim --json prints it, a swarm reads
// it back from each child process.
type SeedReport struct {
	Seed        uint64               `json:"seed"`
	Verdict     string               `json:"verdict"`
	Check       string               `json:"check,omitempty"` // the first failing check
	ExitCode    int                  `json:"exit_code"`
	Error       string               `json:"error,omitempty"` // the simulator failed
	SimSeconds  float64              `json:"sim_seconds"`
	WallSeconds float64              `json:"wall_seconds"`
	Ops         int                  `json:"ops"`
	Faults      int                  `json:"faults"`
	ByFamily    map[fault.Family]int `json:"faults_by_family,omitempty"`
	Stats       sim.Stats            `json:"stats"`
	Report      string               `json:"report,omitempty"`
	Replay      string               `json:"replay,omitempty"`
	Shrunk      *ShrinkReport        `json:"shrunk,omitempty"`
}

// ShrinkReport is what --shrink found: the smallest run of the seed that
// still fails the same check, and the command that replays it.
type ShrinkReport struct {
	Check     string `json:"check"`
	Duration  string `json:"duration"`
	MaxOps    int    `json:"max_ops"`
	MaxFaults int    `json:"max_faults"`
	Skip      []int  `json:"skip_faults,omitempty"`
	Clients   int    `json:"clients"`
	Faults    string `json:"faults"`
	Runs      int    `json:"runs"`
	Replay    string `json:"replay"`
	Report    string `json:"report,omitempty"`
}

// Replay is the raftlock sim command line that reruns cfg.
func Replay(cfg sim.Config) string {
	faults := fault.Join(cfg.Faults)
	if faults == "" {
		faults = "none"
	}
	parts := []string{"raftlock", "sim", "--seed", strconv.FormatUint(cfg.Seed, 10), "--nodes", strconv.Itoa(cfg.Nodes),
		"--duration", cfg.Duration.String(), "--faults", faults}
	if cfg.Bug != "" {
		parts = append(parts, "--unsafe-bug", cfg.Bug)
	}
	if cfg.Clients != 0 && cfg.Clients != 6 {
		parts = append(parts, "--clients", strconv.Itoa(cfg.Clients))
	}
	if cfg.Held > 0 {
		parts = append(parts, "--held", strconv.Itoa(cfg.Held))
		if cfg.KeySize != 0 && cfg.KeySize != 250 {
			parts = append(parts, "--key-size", strconv.Itoa(cfg.KeySize))
		}
	}
	if cfg.MaxUncommitted != 0 && cfg.MaxUncommitted != sim.SeedMaxUncommitted(cfg.Seed) {
		parts = append(parts, "--max-uncommitted", strconv.Itoa(cfg.MaxUncommitted))
	}
	if cfg.MaxOps > 0 {
		parts = append(parts, "--max-ops", strconv.Itoa(cfg.MaxOps))
	}
	if cfg.MaxFaults > 0 {
		parts = append(parts, "--max-faults", strconv.Itoa(cfg.MaxFaults))
	}
	if len(cfg.SkipFaults) > 0 {
		parts = append(parts, "--skip-faults", joinInts(cfg.SkipFaults))
	}
	if cfg.Resource == workload.Unfenced {
		parts = append(parts, "--resource", string(cfg.Resource))
	}
	return strings.Join(parts, " ")
}

// simulate runs cfg and checks it.
func Simulate(cfg sim.Config, timeout time.Duration) (*sim.Result, *checker.Verdict, error) {
	res, err := sim.Run(cfg)
	if err != nil {
		return nil, nil, err
	}
	return res, sim.Check(res, timeout), nil
}

// FillStats copies res's totals into rep.
func FillStats(rep *SeedReport, res *sim.Result) {
	rep.SimSeconds = res.Stats.SimSeconds
	rep.Ops = res.Stats.Ops
	rep.Stats = res.Stats
	rep.ByFamily = res.Stats.Faults
	for _, n := range res.Stats.Faults {
		rep.Faults += n
	}
}

// WriteReport writes a failing run's report: history.jsonl, trace.log
// (from a second, traced run of the same configuration, which must reach
// the same verdict: a run is a pure function of its configuration),
// summary.md and verdict.json.
func WriteReport(dir string, cfg sim.Config, res *sim.Result, v *checker.Verdict, timeout time.Duration) error {
	if err := reportdir.Prepare(dir); err != nil {
		return err
	}
	tf, err := os.Create(filepath.Join(dir, "trace.log"))
	if err != nil {
		return err
	}
	traced := cfg
	traced.Trace = tf
	tres, err := sim.Run(traced)
	if cerr := tf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("traced rerun: %w", err)
	}
	var h1, h2 bytes.Buffer
	if err := sim.WriteHistory(&h1, res); err != nil {
		return err
	}
	if err := sim.WriteHistory(&h2, tres); err != nil {
		return err
	}
	if !bytes.Equal(h1.Bytes(), h2.Bytes()) {
		return fmt.Errorf("the traced rerun of seed %d recorded another history than the first run: the simulation is not deterministic", cfg.Seed)
	}
	write := func(name string, fn func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
		return f.Close()
	}
	if err := write("history.jsonl", func(w io.Writer) error { _, err := w.Write(h1.Bytes()); return err }); err != nil {
		return err
	}
	if err := write("summary.md", func(w io.Writer) error { return sim.WriteSummary(w, cfg, res, v, Replay(cfg)) }); err != nil {
		return err
	}
	// What raftlock check --digests --log needs to redo the checker's part.
	for _, f := range []struct {
		name string
		v    any
	}{{"digests.json", res.Digests}, {"committed-log.json", res.Log}} {
		if err := write(f.name, func(w io.Writer) error { return json.NewEncoder(w).Encode(f.v) }); err != nil {
			return err
		}
	}
	return write("verdict.json", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	})
}

// joinInts writes ints as --skip-faults takes them: comma-separated.
func joinInts(ints []int) string {
	parts := make([]string, len(ints))
	for i, v := range ints {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

// CheckSeed runs cfg's one seed and checks it (Simulate); a failing run's
// report goes to out/seed-N (WriteReport), and with shrink the run is
// shrunk (Shrink, its progress on log). A report whose Error is set is
// the simulator's own failure, returned as the error too; any other error
// is a failure to write or shrink, with no report to show.
func CheckSeed(cfg sim.Config, timeout time.Duration, out string, shrink bool, log io.Writer) (SeedReport, error) {
	start := time.Now()
	res, v, err := Simulate(cfg, timeout)
	rep := SeedReport{Seed: cfg.Seed, Replay: Replay(cfg)}
	if err != nil {
		rep.Verdict, rep.ExitCode, rep.Error = "error", checker.ExitHarness, err.Error()
		return rep, err
	}
	rep.Verdict, rep.ExitCode, rep.Check = v.Verdict, v.ExitCode, sim.FailingCheck(v)
	rep.WallSeconds = time.Since(start).Seconds()
	FillStats(&rep, res)
	if v.ExitCode == checker.ExitValid {
		return rep, nil
	}
	dir := filepath.Join(out, fmt.Sprintf("seed-%d", cfg.Seed))
	if err := WriteReport(dir, cfg, res, v, timeout); err != nil {
		return rep, err
	}
	rep.Report = dir
	if shrink {
		sr, err := Shrink(cfg, rep.Check, timeout, out, log)
		if err != nil {
			return rep, err
		}
		rep.Shrunk = sr
	}
	return rep, nil
}

// WriteText prints the report as raftlock sim does: one line for a valid
// seed; the failing check, where its report is and how to replay it, and
// what shrinking found, for a failing one.
func (rep SeedReport) WriteText(stdout io.Writer) {
	switch {
	case rep.Error != "":
		fmt.Fprintf(stdout, "seed %d: simulator failed: %s\n", rep.Seed, rep.Error)
	case rep.Check == "":
		fmt.Fprintf(stdout, "seed %d: %s (%s, %s, %.1f s simulated in %.2f s)\n",
			rep.Seed, rep.Verdict, cliflag.Plural(rep.Ops, "op", "ops"), cliflag.Plural(rep.Faults, "fault", "faults"), rep.SimSeconds, rep.WallSeconds)
	default:
		fmt.Fprintf(stdout, "seed %d: %s\n", rep.Seed, rep.Check)
		fmt.Fprintf(stdout, "  %s; report in %s\n  replay: %s\n", rep.Verdict, rep.Report, rep.Replay)
		if s := rep.Shrunk; s != nil {
			skipped := ""
			if len(s.Skip) > 0 {
				skipped = fmt.Sprintf(" but %d skipped", len(s.Skip))
			}
			fmt.Fprintf(stdout, "  shrunk (%s) to %s, %s%s (%s), %s, %s: still %s\n  replay the shrunk run: %s\n",
				cliflag.Plural(s.Runs, "run", "runs"), cliflag.Plural(s.MaxOps, "op", "ops"), cliflag.Plural(s.MaxFaults, "fault", "faults"), skipped, s.Faults,
				cliflag.Plural(s.Clients, "client", "clients"), s.Duration, s.Check, s.Replay)
			if s.Report != "" {
				fmt.Fprintf(stdout, "  its report: %s\n", s.Report)
			}
		}
	}
}

// WriteText prints a swarm's totals as raftlock sim --seeds does.
func (s Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\n%-8s %-8s %-8s %-12s %-9s %-8s %-9s %-9s %s\n", "SEEDS", "VALID", "FAILING", "SIMULATED", "OPS", "FAULTS", "WALL", "SEEDS/S", "SPEEDUP")
	fmt.Fprintf(w, "%-8d %-8d %-8d %-12s %-9d %-8d %-9s %-9.1f %.0fx\n", s.Seeds, s.Valid, len(s.Failing)+len(s.Unknown)+len(s.Errors),
		fmt.Sprintf("%.0f s", s.SimSeconds), s.Ops, s.Faults, fmt.Sprintf("%.1f s", s.WallSeconds), s.SeedsPerSec, s.Speedup)
	if s.MembersRemoved+s.MembersAdded > 0 {
		fmt.Fprintf(w, "membership: %s removed, %d added, %d promoted\n", cliflag.Plural(s.MembersRemoved, "member", "members"), s.MembersAdded, s.MembersReplaced)
	}
	if s.FirstFail != nil {
		fmt.Fprintf(w, "first failing seed: %d (%s)\n", *s.FirstFail, s.FirstCheck)
	}
	if len(s.Interrupted) == 0 && s.NotStarted > 0 && s.FirstFail != nil {
		fmt.Fprintf(w, "stopped at the first failing seed: %d not started\n", s.NotStarted)
	} else if len(s.Interrupted) > 0 || s.NotStarted > 0 {
		cut := make([]string, len(s.Interrupted))
		for i, seed := range s.Interrupted {
			cut[i] = strconv.FormatInt(seed, 10)
		}
		fmt.Fprintf(w, "interrupted: %s cut short (%s), %d not started; neither valid nor failing\n",
			cliflag.Plural(len(s.Interrupted), "seed", "seeds"), strings.Join(cut, " "), s.NotStarted)
	}
}

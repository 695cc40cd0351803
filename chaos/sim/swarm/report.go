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
	"github.com/raftlock/raftlock/checker"
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

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/chaos/sim"
	"github.com/raftlock/raftlock/checker"
)

const simSynopsis = "sim [--seed N | --seeds A..B] [--nodes 3|5] [--duration 60s] [--faults " +
	"kill,crash,partition,net,clock,disk,pause,membership] [--unsafe-bug NAME] [--held N [--key-size B]] [--parallel N] [--shrink] [--out DIR] [--json]"

// simFlags are raftlock sim's settings.
type simFlags struct {
	cfg      sim.Config
	seed     seedFlag
	seeds    string
	faults   string
	parallel int
	shrink   bool
	failFast bool
	out      string
	asJSON   bool
	timeout  time.Duration
}

func newSimFlags(f *simFlags) *flag.FlagSet {
	fs := newFlagSet("sim", simSynopsis)
	fs.Var(&f.seed, "seed", "`N`, the one seed of a run: workload, faults and every scheduling choice; random draws one and prints it")
	fs.StringVar(&f.seeds, "seeds", "", "`A..B`: run every seed from A to B (a swarm), each in its own process")
	fs.IntVar(&f.cfg.Nodes, "nodes", 3, "cluster size: 3 or 5")
	fs.DurationVar(&f.cfg.Duration, "duration", 60*time.Second, "simulated time the workload runs, per seed")
	fs.StringVar(&f.faults, "faults", strings.Join(sim.Families, ","), "fault families (comma-separated; 'none' for none)")
	fs.StringVar(&f.cfg.Bug, "unsafe-bug", "", "plant a known bug in every member core (proves the checks catch it)")
	fs.IntVar(&f.parallel, "parallel", runtime.NumCPU(), "seeds run at once by a swarm (each in a subprocess)")
	fs.BoolVar(&f.shrink, "shrink", false, "reduce a failing run (operations, clients, faults, duration) and print the command that replays the smallest")
	fs.BoolVar(&f.failFast, "fail-fast", false, "a swarm stops starting seeds after the first failing one")
	fs.StringVar(&f.out, "out", "sim-out", "a failing seed's report goes to DIR/seed-N (replaced if it holds a previous report, refused if it holds anything else)")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object per seed (and a swarm's summary object)")
	fs.DurationVar(&f.timeout, "timeout", 60*time.Second, "linearizability time budget per seed (exit 2 when exceeded)")
	fs.IntVar(&f.cfg.MaxOps, "max-ops", 0, "start no read or acquire cycle after N client operations were invoked (0: no bound); shrinking sets it")
	fs.IntVar(&f.cfg.MaxFaults, "max-faults", 0, "inject at most N faults (0: no bound); shrinking sets it")
	fs.IntVar(&f.cfg.Clients, "clients", 6, "concurrent clients")
	fs.IntVar(&f.cfg.Held, "held", 0, "take `N` locks with 1 h leases before the workload, on keys it never touches, so it runs against a big table and big snapshots")
	fs.IntVar(&f.cfg.KeySize, "key-size", 250, "bytes of each --held lock's key (16 to 256)")
	fs.IntVar(&f.cfg.MaxUncommitted, "max-uncommitted", 0, "entries a leader keeps proposed and not yet committed, as raftlock node's flag (-1: no limit; 0: drawn from the seed)")
	fs.Var((*intList)(&f.cfg.SkipFaults), "skip-faults", "`I,J,...`: do not inject these faults (1 for the first), keeping their turn; shrinking sets it")
	return fs
}

// simErr: like chaos and check, sim exits 3 when it could not produce a
// verdict (bad flags included), so a failure of its own never reads as a
// verdict: 2 means unknown.
func simErr(format string, args ...any) error { return harnessErr(fmt.Errorf(format, args...)) }

func parseSeeds(s string) (uint64, uint64, error) {
	a, b, ok := strings.Cut(s, "..")
	lo, err1 := strconv.ParseUint(a, 10, 64)
	hi, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || hi < lo {
		return 0, 0, fmt.Errorf("--seeds %q: want A..B with A <= B, e.g. 1..100", s)
	}
	return lo, hi, nil
}

func runSim(args []string, stdout, stderr io.Writer) error {
	var f simFlags
	fs := newSimFlags(&f)
	pos, _, err := parse(fs, args, stderr)
	if err != nil {
		if errHelp(err) != nil {
			return err
		}
		return harnessErr(err)
	}
	if len(pos) > 0 {
		return simErr("unexpected argument %q", pos[0])
	}
	if f.faults != "none" && f.faults != "" {
		f.cfg.Faults = strings.Split(f.faults, ",")
	} else {
		f.cfg.Faults = []string{}
	}
	if f.cfg.Duration <= 0 {
		return simErr("--duration must be positive")
	}
	if f.cfg.Clients < 1 {
		return simErr("--clients must be at least 1")
	}
	f.cfg.Defaults()
	if err := f.cfg.Validate(); err != nil {
		return harnessErr(err)
	}
	if f.parallel < 1 {
		return simErr("--parallel must be at least 1")
	}
	if f.seeds != "" {
		if f.seed.set {
			return simErr("--seed and --seeds exclude each other")
		}
		if f.shrink {
			return simErr("--shrink works on one seed: rerun the failing seed with --seed N --shrink")
		}
		lo, hi, err := parseSeeds(f.seeds)
		if err != nil {
			return harnessErr(err)
		}
		return runSwarm(&f, fs, lo, hi, stdout, stderr)
	}
	f.cfg.Seed = f.seed.value()
	return runOneSeed(&f, stdout, stderr)
}

// seedReport is one seed's outcome: sim --json prints it, the swarm reads it.
type seedReport struct {
	Seed        uint64         `json:"seed"`
	Verdict     string         `json:"verdict"`
	Check       string         `json:"check,omitempty"` // the first failing check
	ExitCode    int            `json:"exit_code"`
	Error       string         `json:"error,omitempty"` // the simulator failed
	SimSeconds  float64        `json:"sim_seconds"`
	WallSeconds float64        `json:"wall_seconds"`
	Ops         int            `json:"ops"`
	Faults      int            `json:"faults"`
	ByFamily    map[string]int `json:"faults_by_family,omitempty"`
	Stats       sim.Stats      `json:"stats"`
	Report      string         `json:"report,omitempty"`
	Replay      string         `json:"replay,omitempty"`
	Shrunk      *shrinkReport  `json:"shrunk,omitempty"`
}

// intList is a flag holding comma-separated positive integers.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	*l = nil
	for _, p := range strings.Split(s, ",") {
		if p == "" {
			continue
		}
		v, err := strconv.Atoi(p)
		if err != nil || v < 1 {
			return fmt.Errorf("want positive integers separated by commas, got %q", p)
		}
		*l = append(*l, v)
	}
	slices.Sort(*l)
	return nil
}

type shrinkReport struct {
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

// replayCommand is the command line that reruns cfg.
func replayCommand(cfg sim.Config) string {
	faults := strings.Join(cfg.Faults, ",")
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
		parts = append(parts, "--skip-faults", (*intList)(&cfg.SkipFaults).String())
	}
	return strings.Join(parts, " ")
}

// simulate runs cfg and checks it.
func simulate(cfg sim.Config, timeout time.Duration) (*sim.Result, *checker.Verdict, error) {
	res, err := sim.Run(cfg)
	if err != nil {
		return nil, nil, err
	}
	return res, sim.Check(res, timeout), nil
}

func runOneSeed(f *simFlags, stdout, stderr io.Writer) error {
	start := time.Now()
	cfg := f.cfg
	res, v, err := simulate(cfg, f.timeout)
	rep := seedReport{Seed: cfg.Seed, Replay: replayCommand(cfg)}
	if err != nil {
		rep.Verdict, rep.ExitCode, rep.Error = "error", checker.ExitHarness, err.Error()
		printSeed(rep, f.asJSON, stdout)
		return harnessErr(err)
	}
	rep.Verdict, rep.ExitCode, rep.Check = v.Verdict, v.ExitCode, sim.FailingCheck(v)
	rep.WallSeconds = time.Since(start).Seconds()
	fillStats(&rep, res)
	if v.ExitCode != checker.ExitValid {
		dir := filepath.Join(f.out, fmt.Sprintf("seed-%d", cfg.Seed))
		if err := writeSimReport(dir, cfg, res, v, f.timeout); err != nil {
			return harnessErr(err)
		}
		rep.Report = dir
		if f.shrink {
			sr, err := shrinkRun(cfg, rep.Check, f, stderr)
			if err != nil {
				return harnessErr(err)
			}
			rep.Shrunk = sr
		}
	}
	printSeed(rep, f.asJSON, stdout)
	switch v.ExitCode {
	case checker.ExitViolation:
		return withCode(checker.ExitViolation, errors.New(""))
	case checker.ExitUnknown:
		return withCode(checker.ExitUnknown, errors.New(""))
	}
	return nil
}

func fillStats(rep *seedReport, res *sim.Result) {
	rep.SimSeconds = res.Stats.SimSeconds
	rep.Ops = res.Stats.Ops
	rep.Stats = res.Stats
	rep.ByFamily = res.Stats.Faults
	for _, n := range res.Stats.Faults {
		rep.Faults += n
	}
}

func printSeed(rep seedReport, asJSON bool, stdout io.Writer) {
	if asJSON {
		json.NewEncoder(stdout).Encode(rep)
		return
	}
	switch {
	case rep.Error != "":
		fmt.Fprintf(stdout, "seed %d: simulator failed: %s\n", rep.Seed, rep.Error)
	case rep.Check == "":
		fmt.Fprintf(stdout, "seed %d: %s (%s, %s, %.1f s simulated in %.2f s)\n",
			rep.Seed, rep.Verdict, plural(rep.Ops, "op", "ops"), plural(rep.Faults, "fault", "faults"), rep.SimSeconds, rep.WallSeconds)
	default:
		fmt.Fprintf(stdout, "seed %d: %s\n", rep.Seed, rep.Check)
		fmt.Fprintf(stdout, "  %s; report in %s\n  replay: %s\n", rep.Verdict, rep.Report, rep.Replay)
		if s := rep.Shrunk; s != nil {
			skipped := ""
			if len(s.Skip) > 0 {
				skipped = fmt.Sprintf(" but %d skipped", len(s.Skip))
			}
			fmt.Fprintf(stdout, "  shrunk (%s) to %s, %s%s (%s), %s, %s: still %s\n  replay the shrunk run: %s\n",
				plural(s.Runs, "run", "runs"), plural(s.MaxOps, "op", "ops"), plural(s.MaxFaults, "fault", "faults"), skipped, s.Faults,
				plural(s.Clients, "client", "clients"), s.Duration, s.Check, s.Replay)
			if s.Report != "" {
				fmt.Fprintf(stdout, "  its report: %s\n", s.Report)
			}
		}
	}
}

// writeSimReport writes a failing run's report: history.jsonl, trace.log
// (from a second, traced run of the same configuration, which must reach
// the same verdict: a run is a pure function of its configuration),
// summary.md and verdict.json.
func writeSimReport(dir string, cfg sim.Config, res *sim.Result, v *checker.Verdict, timeout time.Duration) error {
	if err := prepareReportDir(dir); err != nil {
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
	if err := write("summary.md", func(w io.Writer) error { return sim.WriteSummary(w, cfg, res, v, replayCommand(cfg)) }); err != nil {
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

// shrinkRun searches smaller runs of the same seed that still fail with
// the same check: fewer fault families, fewer faults, fewer clients, fewer
// operations, a shorter duration. Each step keeps a reduction only if the
// run still fails the same way, so the result always reproduces.
func shrinkRun(cfg sim.Config, check string, f *simFlags, stderr io.Writer) (*shrinkReport, error) {
	fmt.Fprintf(stderr, "sim: shrinking seed %d (%s)...\n", cfg.Seed, check)
	runs := 0
	fails := func(c sim.Config) (bool, *sim.Result, error) {
		runs++
		if c.Validate() != nil {
			// A run the simulator refuses (the planted bug needs the
			// family just dropped) cannot fail the same way.
			return false, nil, nil
		}
		res, v, err := simulate(c, f.timeout)
		if err != nil {
			return false, nil, err
		}
		return sim.FailingCheck(v) == check, res, nil
	}
	// Pin the counts the failing run had, so later cuts start from it.
	ok, res, err := fails(cfg)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("shrink: the failing run did not fail again (not deterministic?)")
	}
	best := cfg
	best.MaxOps = res.Stats.Invoked
	injected := 0
	for _, n := range res.Stats.Faults {
		injected += n
	}
	best.MaxFaults = injected
	try := func(c sim.Config) (bool, error) {
		ok, _, err := fails(c)
		if ok {
			best = c
		}
		return ok, err
	}
	// Families: drop each one that is not needed.
	for _, fam := range slices.Clone(best.Faults) {
		c := best
		c.Faults = slices.DeleteFunc(slices.Clone(best.Faults), func(s string) bool { return s == fam })
		if _, err := try(c); err != nil {
			return nil, err
		}
	}
	if len(best.Faults) == 0 {
		best.MaxFaults = 0
	} else {
		// No faults at all?
		c := best
		c.Faults, c.MaxFaults = []string{}, 0
		if _, err := try(c); err != nil {
			return nil, err
		}
	}
	// Counts: halve, then step down linearly near the end.
	shrinkInt := func(get func(sim.Config) int, set func(*sim.Config, int), floor int) error {
		for get(best) > floor {
			cur := get(best)
			moved := false
			for _, next := range []int{floor + (cur-floor)/2, cur * 3 / 4, cur - 1} {
				if next < floor || next >= cur {
					continue
				}
				c := best
				set(&c, next)
				ok, err := try(c)
				if err != nil {
					return err
				}
				if ok {
					moved = true
					break
				}
			}
			if !moved {
				return nil
			}
		}
		return nil
	}
	steps := []struct {
		get   func(sim.Config) int
		set   func(*sim.Config, int)
		floor int
	}{
		{func(c sim.Config) int { return c.MaxFaults }, func(c *sim.Config, v int) { c.MaxFaults = v }, 1},
		{func(c sim.Config) int { return c.Clients }, func(c *sim.Config, v int) { c.Clients = v }, 1},
		{func(c sim.Config) int { return c.MaxOps }, func(c *sim.Config, v int) { c.MaxOps = v }, 1},
		{func(c sim.Config) int { return int(c.Duration / time.Second) }, func(c *sim.Config, v int) { c.Duration = time.Duration(v) * time.Second }, 1},
	}
	for round := 0; round < 2; round++ {
		for _, st := range steps {
			if err := shrinkInt(st.get, st.set, st.floor); err != nil {
				return nil, err
			}
		}
		// Then each remaining fault alone: is it needed?
		for i := 1; i <= best.MaxFaults && len(best.Faults) > 0; i++ {
			if slices.Contains(best.SkipFaults, i) {
				continue
			}
			c := best
			c.SkipFaults = append(slices.Clone(best.SkipFaults), i)
			if _, err := try(c); err != nil {
				return nil, err
			}
		}
	}
	// Every fault skipped: say so plainly, if that still fails.
	if best.MaxFaults > 0 && len(best.SkipFaults) >= best.MaxFaults {
		c := best
		c.Faults, c.MaxFaults, c.SkipFaults = []string{}, 0, nil
		if _, err := try(c); err != nil {
			return nil, err
		}
	}
	// Skips past the last fault mean nothing: leave them out.
	best.SkipFaults = slices.DeleteFunc(slices.Sorted(slices.Values(best.SkipFaults)), func(i int) bool { return i > best.MaxFaults })
	if len(best.SkipFaults) == 0 {
		best.SkipFaults = nil
	}
	sr := &shrinkReport{Check: check, Duration: best.Duration.String(), MaxOps: best.MaxOps, MaxFaults: best.MaxFaults, Skip: best.SkipFaults,
		Clients: best.Clients, Faults: strings.Join(best.Faults, ","), Runs: runs, Replay: replayCommand(best)}
	if sr.Faults == "" {
		sr.Faults = "none"
	}
	res, v, err := simulate(best, f.timeout)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(f.out, fmt.Sprintf("seed-%d-shrunk", cfg.Seed))
	if err := writeSimReport(dir, best, res, v, f.timeout); err != nil {
		return nil, err
	}
	sr.Report = dir
	return sr, nil
}

// verdictInterrupted is the verdict of a seed whose run Ctrl-C cut short:
// no verdict at all, never a failure.
const verdictInterrupted = "interrupted"

// swarmSummary is a swarm's totals. Seeds counts the seeds that ran to
// the end; Interrupted lists those Ctrl-C cut short, NotStarted counts the
// rest of the range.
type swarmSummary struct {
	Seeds       int     `json:"seeds"`
	Valid       int     `json:"valid"`
	Failing     []int64 `json:"failing_seeds"`
	Unknown     []int64 `json:"unknown_seeds"`
	Errors      []int64 `json:"error_seeds"`
	Interrupted []int64 `json:"interrupted_seeds"`
	NotStarted  int     `json:"not_started"`
	FirstFail   *int64  `json:"first_failing_seed,omitempty"`
	FirstCheck  string  `json:"first_failing_check,omitempty"`
	SimSeconds  float64 `json:"sim_seconds"`
	Ops         int     `json:"ops"`
	Faults      int     `json:"faults"`
	WallSeconds float64 `json:"wall_seconds"`
	SeedsPerSec float64 `json:"seeds_per_second"`
	Speedup     float64 `json:"speedup"`

	// The membership family's changes over the swarm (members_replaced:
	// newcomers promoted, as chaos counts them).
	MembersRemoved  int `json:"members_removed"`
	MembersAdded    int `json:"members_added"`
	MembersReplaced int `json:"members_replaced"`
}

// runSwarm runs seeds lo..hi, each in a subprocess (raft's election
// timeouts come from the process-global crypto/rand.Reader, which a run
// replaces: one run per process), up to f.parallel at once.
func runSwarm(f *simFlags, fs *flag.FlagSet, lo, hi uint64, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return harnessErr(err)
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return harnessErr(fmt.Errorf("--out %s: %w", f.out, err))
	}
	// The child gets every flag set here except the swarm's own.
	var common []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "seed", "seeds", "parallel", "json", "fail-fast", "shrink":
		default:
			common = append(common, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	if !slices.ContainsFunc(common, func(s string) bool { return strings.HasPrefix(s, "--out=") }) {
		common = append(common, "--out="+f.out)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	total := int(hi - lo + 1)
	start := time.Now()
	results := make(map[uint64]seedReport, total)
	var mu sync.Mutex
	var wg sync.WaitGroup
	seeds := make(chan uint64)
	failed := false
	for range min(f.parallel, total) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range seeds {
				rep := runChild(ctx, exe, seed, common)
				mu.Lock()
				results[seed] = rep
				if rep.ExitCode != checker.ExitValid && rep.Verdict != verdictInterrupted {
					failed = true
					if !f.asJSON {
						printSeed(rep, false, stdout)
					}
				}
				mu.Unlock()
			}
		}()
	}
	// Progress: one line every two seconds.
	progressDone := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
			}
			mu.Lock()
			done, bad := len(results), 0
			var simS float64
			for _, r := range results {
				simS += r.SimSeconds
				if r.ExitCode != checker.ExitValid && r.Verdict != verdictInterrupted {
					bad++
				}
			}
			mu.Unlock()
			el := time.Since(start).Seconds()
			fmt.Fprintf(stderr, "sim: %d/%d seeds, %d failing, %.1f seeds/s, %.0fx real time\n", done, total, bad, float64(done)/el, simS/el)
		}
	}()
dispatch:
	for seed := lo; seed <= hi; seed++ {
		mu.Lock()
		stopNow := f.failFast && failed
		mu.Unlock()
		if stopNow || ctx.Err() != nil {
			break
		}
		select {
		case seeds <- seed:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(seeds)
	wg.Wait()
	close(progressDone)
	wall := time.Since(start).Seconds()

	sum := swarmSummary{WallSeconds: wall, Failing: []int64{}, Unknown: []int64{}, Errors: []int64{}, Interrupted: []int64{},
		NotStarted: total - len(results)}
	order := make([]uint64, 0, len(results))
	for s := range results {
		order = append(order, s)
	}
	slices.Sort(order)
	for _, s := range order {
		r := results[s]
		if r.Verdict == verdictInterrupted {
			sum.Interrupted = append(sum.Interrupted, int64(s))
			if f.asJSON {
				json.NewEncoder(stdout).Encode(r)
			}
			continue
		}
		sum.Seeds++
		sum.SimSeconds += r.SimSeconds
		sum.Ops += r.Ops
		sum.Faults += r.Faults
		sum.MembersRemoved += r.Stats.MembersRemoved
		sum.MembersAdded += r.Stats.MembersAdded
		sum.MembersReplaced += r.Stats.MembersReplaced
		switch r.ExitCode {
		case checker.ExitValid:
			sum.Valid++
		case checker.ExitViolation:
			sum.Failing = append(sum.Failing, int64(s))
			if sum.FirstFail == nil {
				sum.FirstFail, sum.FirstCheck = new(int64(s)), r.Check
			}
		case checker.ExitUnknown:
			sum.Unknown = append(sum.Unknown, int64(s))
		default:
			sum.Errors = append(sum.Errors, int64(s))
		}
		if f.asJSON {
			json.NewEncoder(stdout).Encode(r)
		}
	}
	if wall > 0 {
		sum.SeedsPerSec = float64(sum.Seeds) / wall
		sum.Speedup = sum.SimSeconds / wall
	}
	if f.asJSON {
		json.NewEncoder(stdout).Encode(map[string]any{"summary": sum})
	} else {
		printSwarmSummary(sum, stdout)
	}
	// A violation found before Ctrl-C is a finding; an interruption alone
	// is not (130, as a shell reports SIGINT), nor are the seeds it cut.
	switch {
	case len(sum.Failing) > 0:
		return withCode(checker.ExitViolation, fmt.Errorf("seed %d: %s", *sum.FirstFail, sum.FirstCheck))
	case ctx.Err() != nil || len(sum.Interrupted) > 0:
		return withCode(exitInterrupted, fmt.Errorf("interrupted: %s cut short, %d not started; no violation in the %d that finished",
			plural(len(sum.Interrupted), "seed", "seeds"), sum.NotStarted, sum.Seeds))
	case len(sum.Errors) > 0:
		return harnessErr(fmt.Errorf("the simulator failed at seeds %v", sum.Errors))
	case len(sum.Unknown) > 0:
		return withCode(checker.ExitUnknown, fmt.Errorf("no verdict at seeds %v", sum.Unknown))
	}
	return nil
}

func printSwarmSummary(s swarmSummary, w io.Writer) {
	fmt.Fprintf(w, "\n%-8s %-8s %-8s %-12s %-9s %-8s %-9s %-9s %s\n", "SEEDS", "VALID", "FAILING", "SIMULATED", "OPS", "FAULTS", "WALL", "SEEDS/S", "SPEEDUP")
	fmt.Fprintf(w, "%-8d %-8d %-8d %-12s %-9d %-8d %-9s %-9.1f %.0fx\n", s.Seeds, s.Valid, len(s.Failing)+len(s.Unknown)+len(s.Errors),
		fmt.Sprintf("%.0f s", s.SimSeconds), s.Ops, s.Faults, fmt.Sprintf("%.1f s", s.WallSeconds), s.SeedsPerSec, s.Speedup)
	if s.MembersRemoved+s.MembersAdded > 0 {
		fmt.Fprintf(w, "membership: %s removed, %d added, %d promoted\n", plural(s.MembersRemoved, "member", "members"), s.MembersAdded, s.MembersReplaced)
	}
	if s.FirstFail != nil {
		fmt.Fprintf(w, "first failing seed: %d (%s)\n", *s.FirstFail, s.FirstCheck)
	}
	if len(s.Interrupted) > 0 || s.NotStarted > 0 {
		cut := make([]string, len(s.Interrupted))
		for i, seed := range s.Interrupted {
			cut[i] = strconv.FormatInt(seed, 10)
		}
		fmt.Fprintf(w, "interrupted: %s cut short (%s), %d not started; neither valid nor failing\n",
			plural(len(s.Interrupted), "seed", "seeds"), strings.Join(cut, " "), s.NotStarted)
	}
}

// runChild runs one seed in a subprocess and reads its JSON line.
func runChild(ctx context.Context, exe string, seed uint64, common []string) seedReport {
	args := append([]string{"sim", "--seed", strconv.FormatUint(seed, 10), "--json"}, common...)
	cmd := exec.CommandContext(ctx, exe, args...)
	// The swarm's own settings must not reach the child through the
	// environment: RAFTLOCK_SEEDS would make every child a swarm.
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case envName("seed"), envName("seeds"), envName("shrink"), envName("parallel"), envName("fail-fast"):
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var rep seedReport
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	found := false
	for sc.Scan() {
		if json.Unmarshal(sc.Bytes(), &rep) == nil && rep.Seed == seed {
			found = true
		}
	}
	if !found && (ctx.Err() != nil || diedOfInterrupt(err)) {
		// Ctrl-C reaches the children too (one process group): a child
		// that died of it, or that the swarm killed for it, was cut
		// short, whichever of the two saw the signal first.
		return seedReport{Seed: seed, Verdict: verdictInterrupted, ExitCode: exitInterrupted}
	}
	if !found {
		msg := strings.TrimSpace(errb.String())
		if err != nil {
			msg = strings.TrimSpace(err.Error() + ": " + msg)
		}
		return seedReport{Seed: seed, Verdict: "error", ExitCode: checker.ExitHarness, Error: "no result: " + msg}
	}
	return rep
}

// diedOfInterrupt says whether a child process died of SIGINT or SIGTERM.
func diedOfInterrupt(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGTERM)
}

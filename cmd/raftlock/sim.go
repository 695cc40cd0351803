package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/sim"
	"github.com/raftlock/raftlock/chaos/sim/swarm"
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
	fs.StringVar(&f.faults, "faults", fault.Join(sim.Families), "fault families (comma-separated; 'none' for none)")
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
	if err := parseHarnessNoArgs(fs, args, stderr); err != nil {
		return err
	}
	if f.faults != "none" && f.faults != "" {
		f.cfg.Faults = fault.Split(f.faults)
	} else {
		f.cfg.Faults = []fault.Family{}
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

func runOneSeed(f *simFlags, stdout, stderr io.Writer) error {
	rep, err := swarm.CheckSeed(f.cfg, f.timeout, f.out, f.shrink, stderr)
	if rep.Error != "" {
		printSeed(rep, f.asJSON, stdout)
	}
	if err != nil {
		return harnessErr(err)
	}
	printSeed(rep, f.asJSON, stdout)
	return verdictExit(rep.ExitCode, "", "")
}

func printSeed(rep swarm.SeedReport, asJSON bool, stdout io.Writer) {
	if asJSON {
		json.NewEncoder(stdout).Encode(rep)
		return
	}
	rep.WriteText(stdout)
}

// runSwarm runs seeds lo..hi, each in a child process, up to f.parallel at
// once, and prints each failing seed as it ends and the totals.
func runSwarm(f *simFlags, fs *flag.FlagSet, lo, hi uint64, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return harnessErr(err)
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return harnessErr(fmt.Errorf("--out %s: %w", f.out, err))
	}
	opt := swarm.Options{Exe: exe, Args: childSimArgs(f, fs), Env: childSimEnv(), Lo: lo, Hi: hi,
		Parallel: f.parallel, FailFast: f.failFast, Progress: stderr}
	if !f.asJSON {
		opt.Failed = func(rep swarm.SeedReport) { printSeed(rep, false, stdout) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, reps := swarm.Run(ctx, opt)
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range reps {
			enc.Encode(r)
		}
		enc.Encode(map[string]any{"summary": sum})
	} else {
		sum.WriteText(stdout)
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

// childSimArgs are the flags set here that a swarm's child gets: all but
// the swarm's own.
func childSimArgs(f *simFlags, fs *flag.FlagSet) []string {
	var args []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "seed", "seeds", "parallel", "json", "fail-fast", "shrink":
		default:
			args = append(args, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	if !slices.ContainsFunc(args, func(s string) bool { return strings.HasPrefix(s, "--out=") }) {
		args = append(args, "--out="+f.out)
	}
	return args
}

// childSimEnv is this process's environment without the swarm's own
// settings: RAFTLOCK_SEEDS would make every child a swarm.
func childSimEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case envName("seed"), envName("seeds"), envName("shrink"), envName("parallel"), envName("fail-fast"):
		default:
			env = append(env, kv)
		}
	}
	return env
}

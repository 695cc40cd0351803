package swarm

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/sim"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/internal/cliflag"
)

// Synopsis is raftlock sim's usage line.
const Synopsis = "sim [--seed N | --seeds A..B] [--nodes 3|5] [--duration 60s] [--faults " +
	"kill,crash,partition,net,clock,disk,pause,membership] [--unsafe-bug NAME] [--held N [--key-size B]] [--parallel N] [--shrink] [--out DIR] [--json]"

// Command is a raftlock sim command line: one seed (RunSeed) or a swarm
// of them (RunSwarm). Like chaos and check, sim exits 3 when it could not
// produce a verdict (bad flags included), so a failure of its own never
// reads as a verdict: 2 means unknown.
type Command struct {
	Config   sim.Config
	Seed     cliflag.Seed
	seeds    string
	faults   string
	parallel int
	shrink   bool
	failFast bool
	out      string
	asJSON   bool
	timeout  time.Duration
	lo, hi   uint64
}

// RegisterFlags defines raftlock sim's flags on fs.
func (c *Command) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Seed, "seed", "`N`, the one seed of a run: workload, faults and every scheduling choice; random draws one and prints it")
	fs.StringVar(&c.seeds, "seeds", "", "`A..B`: run every seed from A to B (a swarm), each in its own process")
	fs.IntVar(&c.Config.Nodes, "nodes", 3, "cluster size: 3 or 5")
	fs.DurationVar(&c.Config.Duration, "duration", 60*time.Second, "simulated time the workload runs, per seed")
	fs.StringVar(&c.faults, "faults", fault.Join(sim.Families), "fault families (comma-separated; 'none' for none)")
	fs.StringVar(&c.Config.Bug, "unsafe-bug", "", "plant a known bug in every member core (proves the checks catch it)")
	fs.IntVar(&c.parallel, "parallel", runtime.NumCPU(), "seeds run at once by a swarm (each in a subprocess)")
	fs.BoolVar(&c.shrink, "shrink", false, "reduce a failing run (operations, clients, faults, duration) and print the command that replays the smallest")
	fs.BoolVar(&c.failFast, "fail-fast", false, "a swarm stops starting seeds after the first failing one")
	fs.StringVar(&c.out, "out", "sim-out", "a failing seed's report goes to DIR/seed-N (replaced if it holds a previous report, refused if it holds anything else)")
	fs.BoolVar(&c.asJSON, "json", false, "print one JSON object per seed (and a swarm's summary object)")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "linearizability time budget per seed (exit 2 when exceeded)")
	fs.IntVar(&c.Config.MaxOps, "max-ops", 0, "start no read or acquire cycle after N client operations were invoked (0: no bound); shrinking sets it")
	fs.IntVar(&c.Config.MaxFaults, "max-faults", 0, "inject at most N faults (0: no bound); shrinking sets it")
	fs.IntVar(&c.Config.Clients, "clients", 6, "concurrent clients")
	fs.IntVar(&c.Config.Held, "held", 0, "take `N` locks with 1 h leases before the workload, on keys it never touches, so it runs against a big table and big snapshots")
	fs.IntVar(&c.Config.KeySize, "key-size", 250, "bytes of each --held lock's key (16 to 256)")
	fs.IntVar(&c.Config.MaxUncommitted, "max-uncommitted", 0, "entries a leader keeps proposed and not yet committed, as raftlock node's flag (-1: no limit; 0: drawn from the seed)")
	fs.StringVar((*string)(&c.Config.Resource), "resource", "fenced", "what the locks guard: fenced (refuses a token lower than the highest it accepted) or unfenced (a register that accepts every write: shows what fencing buys)")
	fs.Var((*cliflag.IntList)(&c.Config.SkipFaults), "skip-faults", "`I,J,...`: do not inject these faults (1 for the first), keeping their turn; shrinking sets it")
}

// JSON says whether --json was asked for.
func (c *Command) JSON() bool { return c.asJSON }

// Check checks the parsed flags and says whether they ask for a swarm.
// Its errors are the harness's (exit 3), never a verdict.
func (c *Command) Check() (swarm bool, err error) {
	c.Config.Faults = []fault.Family{}
	if c.faults != "none" && c.faults != "" {
		c.Config.Faults = fault.Split(c.faults)
	}
	switch {
	case c.Config.Duration <= 0:
		return false, errors.New("--duration must be positive")
	case c.Config.Clients < 1:
		return false, errors.New("--clients must be at least 1")
	}
	c.Config.Defaults()
	if err := c.Config.Validate(); err != nil {
		return false, err
	}
	switch {
	case c.parallel < 1:
		return false, errors.New("--parallel must be at least 1")
	case c.seeds == "":
		c.Config.Seed = c.Seed.Value()
		return false, nil
	case c.Seed.IsSet():
		return false, errors.New("--seed and --seeds exclude each other")
	case c.shrink:
		return false, errors.New("--shrink works on one seed: rerun the failing seed with --seed N --shrink")
	}
	c.lo, c.hi, err = parseSeeds(c.seeds)
	return true, err
}

func parseSeeds(s string) (uint64, uint64, error) {
	a, b, ok := strings.Cut(s, "..")
	lo, err1 := strconv.ParseUint(a, 10, 64)
	hi, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || hi < lo {
		return 0, 0, fmt.Errorf("--seeds %q: want A..B with A <= B, e.g. 1..100", s)
	}
	return lo, hi, nil
}

// harnessErr is a failure of the harness, exit 3.
func harnessErr(err error) error { return cliflag.WithCode(checker.ExitHarness, err) }

// RunSeed checks the one seed and prints its report; the error carries
// the verdict's exit code.
func (c *Command) RunSeed(stdout, stderr io.Writer) error {
	rep, err := CheckSeed(c.Config, c.timeout, c.out, c.shrink, stderr)
	if rep.Error != "" {
		c.print(rep, stdout)
	}
	if err != nil {
		return harnessErr(err)
	}
	c.print(rep, stdout)
	if rep.ExitCode == checker.ExitValid {
		return nil
	}
	return cliflag.WithCode(rep.ExitCode, errors.New(""))
}

func (c *Command) print(rep SeedReport, stdout io.Writer) {
	if c.asJSON {
		json.NewEncoder(stdout).Encode(rep)
		return
	}
	rep.WriteText(stdout)
}

// RunSwarm runs the seeds, each in a child process of exe given the flags
// set on fs, up to --parallel at once, until ctx ends; it prints each
// failing seed as it ends and the totals. The error carries the exit code:
// a violation found, an interruption (130, as a shell reports SIGINT), the
// simulator's failure, or no verdict.
func (c *Command) RunSwarm(ctx context.Context, exe string, fs *flag.FlagSet, stdout, stderr io.Writer) error {
	_, statErr := os.Stat(c.out)
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return harnessErr(fmt.Errorf("--out %s: %w", c.out, err))
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// Made here so that an unwritable --out fails before any seed
		// runs; left behind only if a failing seed wrote its report in it.
		defer os.Remove(c.out)
	}
	opt := Options{Exe: exe, Args: c.childArgs(fs), Env: childEnv(os.Environ()), Lo: c.lo, Hi: c.hi,
		Parallel: c.parallel, FailFast: c.failFast, Progress: stderr}
	if !c.asJSON {
		opt.Failed = func(rep SeedReport) { rep.WriteText(stdout) }
	}
	sum, reps := Run(ctx, opt)
	if c.asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range reps {
			enc.Encode(r)
		}
		enc.Encode(map[string]any{"summary": sum})
	} else {
		sum.WriteText(stdout)
	}
	return sum.exit(ctx.Err() != nil)
}

// exit is the swarm's end: a violation found before Ctrl-C is a finding;
// an interruption alone is not, nor are the seeds it cut.
func (s Summary) exit(interrupted bool) error {
	switch {
	case len(s.Failing) > 0:
		return cliflag.WithCode(checker.ExitViolation, fmt.Errorf("seed %d: %s", *s.FirstFail, s.FirstCheck))
	case interrupted || len(s.Interrupted) > 0:
		return cliflag.WithCode(ExitInterrupted, fmt.Errorf("interrupted: %s cut short, %d not started; no violation in the %d that finished",
			cliflag.Plural(len(s.Interrupted), "seed", "seeds"), s.NotStarted, s.Seeds))
	case len(s.Errors) > 0:
		return harnessErr(fmt.Errorf("the simulator failed at seeds %v", s.Errors))
	case len(s.Unknown) > 0:
		return cliflag.WithCode(checker.ExitUnknown, fmt.Errorf("no verdict at seeds %v", s.Unknown))
	}
	return nil
}

// swarmOnly are the flags of the swarm itself, which its children do not
// get (they get --json of their own).
var swarmOnly = []string{"seed", "seeds", "parallel", "json", "fail-fast", "shrink"}

// swarmEnv are the variables of the swarm's settings a child must not
// read: RAFTLOCK_SEEDS would make every child a swarm.
var swarmEnv = []string{cliflag.EnvName("seed"), cliflag.EnvName("seeds"), cliflag.EnvName("shrink"), cliflag.EnvName("parallel"), cliflag.EnvName("fail-fast")}

// childArgs are the flags set on fs that a swarm's child gets: all but
// the swarm's own.
func (c *Command) childArgs(fs *flag.FlagSet) []string {
	var args []string
	fs.Visit(func(fl *flag.Flag) {
		if !slices.Contains(swarmOnly, fl.Name) {
			args = append(args, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	if !slices.ContainsFunc(args, func(s string) bool { return strings.HasPrefix(s, "--out=") }) {
		args = append(args, "--out="+c.out)
	}
	return args
}

// childEnv is environ without the swarm's own settings (swarmEnv).
func childEnv(environ []string) []string {
	var env []string
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(swarmEnv, name) {
			env = append(env, kv)
		}
	}
	return env
}

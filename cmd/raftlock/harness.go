package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/chaos"
	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/internal/reportdir"
)

// harnessErr: chaos and check exit 3 when the harness itself failed (bad
// flags included), so that it never reads as a violation.
func harnessErr(err error) error { return withCode(checker.ExitHarness, err) }

func verdictErr(v *checker.Verdict) error {
	return verdictExit(v.ExitCode, "violations found", "no verdict: the checker timed out")
}

// verdictExit is a harness's exit for a verdict's exit code: nil when
// valid, else the code with the message given for it.
func verdictExit(code int, violation, unknown string) error {
	switch code {
	case checker.ExitViolation:
		return withCode(code, errors.New(violation))
	case checker.ExitUnknown:
		return withCode(code, errors.New(unknown))
	}
	return nil
}

// printVerdict prints the verdict and, last, where the reports are with
// the names of the files this run wrote there.
func printVerdict(v *checker.Verdict, out string, written []string, asJSON bool, stdout io.Writer) {
	if asJSON {
		json.NewEncoder(stdout).Encode(v)
		return
	}
	v.Summary(stdout)
	if out != "" {
		fmt.Fprintf(stdout, "\nreports in %s (%s)\n", out, reportdir.Describe(written))
	}
}

func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", "check HISTORY.jsonl [--out DIR] [--digests FILE] [--log FILE] [--resolved FILE] [--timeout 60s] [--lease-tolerance 0] [--clock-faults] [--json]")
	out := fs.String("out", "", "write verdict.json, summary.md, visualisations and the latency plot here")
	digests := fs.String("digests", "", "JSON list of {node, applied, digest} for the convergence check")
	logFile := fs.String("log", "", "committed-log.json of a chaos run: settles info operations and audits the history against the log")
	resolved := fs.String("resolved", "", "JSON list of {index, f, happened, token}: info operations already settled")
	timeout := fs.Duration("timeout", 60*time.Second, "linearizability time budget (exit 2 when exceeded)")
	tolerance := fs.Duration("lease-tolerance", 0, "slack allowed by the lease timing check (0 is exact: deadlines are set after the invocation, on the same monotonic clock)")
	clockFaults := fs.Bool("clock-faults", false, "declare clocks unreliable beyond the history's clock events: lease timing is reported, not decisive (default: decided, with clock fault windows read from the history)")
	asJSON := fs.Bool("json", false, "print the verdict as JSON")
	pos, err := parseHarness(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return harnessErr(argErr(fs, "want exactly one HISTORY file"))
	}
	opts := checker.Options{Timeout: *timeout, LeaseTolerance: *tolerance, ClockOverride: *clockFaults}
	in := checkInputs{history: pos[0], digests: *digests, log: *logFile, resolved: *resolved}
	events, err := in.load(&opts)
	if err != nil {
		return harnessErr(err)
	}
	if *out != "" {
		if err := in.prepareOut(*out); err != nil {
			return harnessErr(err)
		}
	}
	v := checker.Check(events, opts)
	var written []string
	if *out != "" {
		if written, err = v.WriteReports(*out); err != nil {
			return harnessErr(err)
		}
	}
	printVerdict(v, *out, written, *asJSON, stdout)
	if v.Stats.Ops == 0 {
		return withCode(checker.ExitUnknown, fmt.Errorf("%s: nothing to check: the history has no client operations", pos[0]))
	}
	return verdictErr(v)
}

// checkInputs are the files check reads.
type checkInputs struct{ history, digests, log, resolved string }

// load reads the history, and the other inputs named into opts.
func (in checkInputs) load(opts *checker.Options) ([]history.Event, error) {
	f, err := os.Open(in.history)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, events, err := history.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: malformed history: %w", in.history, err)
	}
	if in.log != "" {
		opts.Log = &checker.CommittedLog{}
	}
	for _, j := range []struct {
		file string
		into any
	}{{in.digests, &opts.Digests}, {in.log, opts.Log}, {in.resolved, &opts.Resolutions}} {
		if j.file == "" {
			continue
		}
		b, err := os.ReadFile(j.file)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, j.into); err != nil {
			return nil, fmt.Errorf("%s: %w", j.file, err)
		}
	}
	return events, nil
}

// prepareOut readies the report directory out: as chaos and sim do, it
// replaces only a previous report, refuses anything else, and never the
// report being checked, whose history and logs would go with it.
func (in checkInputs) prepareOut(out string) error {
	for _, f := range []string{in.history, in.digests, in.log, in.resolved} {
		if f != "" && within(f, out) {
			return fmt.Errorf("--out %s holds %s, an input of this check: choose another --out", out, f)
		}
	}
	return reportdir.Prepare(out)
}

// within says whether file lies in dir or below it.
func within(file, dir string) bool {
	f, err1 := filepath.Abs(file)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, f)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// parseHarness parses the flags of a harness command (chaos, check,
// sim): a bad flag exits 3, as the harness failing does, never as a
// verdict would.
func parseHarness(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	pos, _, err := parse(fs, args, stderr)
	if err != nil {
		if errHelp(err) != nil {
			return nil, err
		}
		return nil, harnessErr(err)
	}
	return pos, nil
}

// parseHarnessNoArgs is parseHarness for a command that takes flags only.
func parseHarnessNoArgs(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	pos, err := parseHarness(fs, args, stderr)
	if err == nil && len(pos) > 0 {
		err = harnessErr(fmt.Errorf("unexpected argument %q", pos[0]))
	}
	return err
}

func errHelp(err error) error {
	if err != nil && strings.Contains(err.Error(), "help requested") {
		return err
	}
	return nil
}

// chaosFlags defines raftlock chaos's flags on a new flag set, their
// defaults chaos.Defaults: the run length is --duration, as in every command (--time stays as an alias for
// scripts written before), and the fault schedule's knobs are --fault-*.
func chaosFlags(cfg *chaos.Config, seed *seedFlag) *flag.FlagSet {
	d := chaos.Defaults()
	fs := newFlagSet("chaos", "chaos [--nodes 3] [--seed N] [--duration 30s] [--nemesis "+fault.Join(chaos.Families)+"] (opt-in: "+fault.Join(chaos.OptInFamilies)+") [--snapshot-every 100] [--held N [--key-size 250]] [--out DIR] [--unsafe-bug NAME]")
	fs.IntVar(&cfg.Nodes, "nodes", d.Nodes, "cluster size: 3 or 5")
	fs.Var(seed, "seed", "`N`, the seed of the fault schedule and the workload; random draws one and prints it, so the run can be replayed")
	fs.DurationVar(&cfg.Time, "duration", d.Time, "how long the workload runs")
	fs.DurationVar(&cfg.Time, "time", d.Time, "alias of --duration")
	fs.IntVar(&cfg.Clients, "clients", d.Clients, "concurrent clients")
	fs.IntVar(&cfg.Keys, "keys", d.Keys, "keys they contend on")
	fs.DurationVar(&cfg.FaultInterval, "fault-interval", d.FaultInterval, "mean quiet time between faults")
	fs.DurationVar(&cfg.FaultDuration, "fault-duration", d.FaultDuration, "mean fault length")
	fs.DurationVar(&cfg.LeaseMin, "lease-min", d.LeaseMin, "shortest lease a client asks for")
	fs.DurationVar(&cfg.LeaseMax, "lease-max", d.LeaseMax, "longest lease a client asks for")
	fs.Uint64Var(&cfg.SnapshotEvery, "snapshot-every", d.SnapshotEvery, "every member's --snapshot-every: applied entries between snapshots")
	fs.Uint64Var(&cfg.SnapshotKeep, "snapshot-keep", d.SnapshotKeep, "every member's --snapshot-keep: entries kept behind a snapshot (small, so an isolated follower soon needs one)")
	fs.IntVar(&cfg.Held, "held", d.Held, "`N` locks taken before the workload (1 h leases, keys it never touches), so snapshots are big; members then snapshot by entries, in small chunks")
	fs.IntVar(&cfg.KeySize, "key-size", d.KeySize, "`bytes` of each held key (1..256)")
	fs.IntVar(&cfg.SnapshotChunkSize, "snapshot-chunk-size", d.SnapshotChunkSize, "every member's --snapshot-chunk-size in `bytes` (0: 16384 with --held, else the member's default)")
	fs.IntVar(&cfg.PeerFrameLimit, "peer-frame-limit", d.PeerFrameLimit, "every member's --peer-frame-limit in `bytes` (0: 2 MiB with --held, else the member's default; at least 1.125 MiB)")
	fs.StringVar(&cfg.Bug, "unsafe-bug", "", "plant a known bug in every node (proves the checker catches it)")
	fs.StringVar(&cfg.Out, "out", "", "report directory (default chaos-out/seed-N); replaced if it holds a previous report, refused if it holds anything else")
	fs.StringVar(&cfg.Bin, "bin", "", "raftlock executable for the nodes (default: this one)")
	return fs
}

// seedFlag is chaos's --seed. Left unset, it shows as "random" in the help,
// which thus reads the same on every run, and a seed is drawn after parsing.
type seedFlag struct {
	v   uint64
	set bool
}

func (s *seedFlag) String() string {
	if s == nil || !s.set {
		return "random"
	}
	return strconv.FormatUint(s.v, 10)
}

func (s *seedFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return errors.New("want a non-negative integer")
	}
	s.v, s.set = n, true
	return nil
}

// value is the seed given, or a new one drawn small enough to retype.
func (s *seedFlag) value() uint64 {
	if !s.set {
		s.v, s.set = rand.Uint64N(1_000_000), true
	}
	return s.v
}

func runChaos(args []string, stdout, stderr io.Writer) error {
	cfg := chaos.Config{}
	var seed seedFlag
	fs := chaosFlags(&cfg, &seed)
	nemeses := fs.String("nemesis", fault.Join(chaos.Families), "fault families (comma-separated; 'none' for none; opt-in, never in the default: "+fault.Join(chaos.OptInFamilies)+")")
	asJSON := fs.Bool("json", false, "print the verdict as JSON")
	if err := parseHarnessNoArgs(fs, args, stderr); err != nil {
		return err
	}
	cfg.Seed = seed.value()
	if *nemeses != "none" && *nemeses != "" {
		cfg.Nemeses = fault.Split(*nemeses)
	}
	// Every flag is checked before the disk is touched: a mistyped re-run
	// must not cost the previous report.
	if err := cfg.Validate(); err != nil {
		return harnessErr(err)
	}
	if cfg.Out == "" {
		cfg.Out = filepath.Join("chaos-out", fmt.Sprintf("seed-%d", cfg.Seed))
	}
	if cfg.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return harnessErr(err)
		}
		cfg.Bin = exe
	}
	if err := reportdir.Prepare(cfg.Out); err != nil {
		return harnessErr(err)
	}
	cfg.Progress = stderr
	if log, err := newLogger("warn", "text", stderr); err == nil {
		cfg.Log = log
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "chaos: seed %d, %d nodes, %v, nemeses %v, bug %q -> %s\n", cfg.Seed, cfg.Nodes, cfg.Time, cfg.Nemeses, cfg.Bug, cfg.Out)
	if cfg.Held > 0 {
		t := cfg.Transfer()
		fmt.Fprintf(stderr, "chaos: %d held locks of %d-byte keys; members snapshot every %d entries, in chunks of %d bytes, frame limit %d\n",
			cfg.Held, cfg.KeySize, cfg.SnapshotEvery, t.ChunkSize, t.FrameLimit)
	}
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		return harnessErr(err)
	}
	if res.Log != nil {
		// What the audit settled, for a reader (check --log redoes it).
		if b, err := json.MarshalIndent(checker.Resolve(res.Events, *res.Log), "", "  "); err == nil {
			os.WriteFile(filepath.Join(cfg.Out, "resolved.json"), append(b, '\n'), 0o644)
		}
	}
	v := chaos.Check(res, 0)
	if _, err := v.WriteReports(cfg.Out); err != nil {
		return harnessErr(err)
	}
	written, err := reportdir.Files(cfg.Out)
	if err != nil {
		return harnessErr(err)
	}
	printVerdict(v, cfg.Out, written, *asJSON, stdout)
	return verdictErr(v)
}

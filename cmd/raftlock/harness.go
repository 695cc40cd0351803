package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/raftlock/raftlock/chaos"
	"github.com/raftlock/raftlock/chaos/sim/swarm"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/reportdir"
)

// harnessErr: chaos and check exit 3 when the harness itself failed (bad
// flags included), so that it never reads as a violation.
func harnessErr(err error) error { return withCode(checker.ExitHarness, err) }

// harnessFailure is what check, chaos and sim print with --json when they
// reach no verdict (exit 3), so that a script reading stdout still reads
// an object with the verdict's first fields, and why.
type harnessFailure struct {
	Valid    bool   `json:"valid"`
	Verdict  string `json:"verdict"` // "harness-failed"
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error"`
}

// noVerdictJSON prints, with --json, why a harness command reached no
// verdict (exit 3) when it printed nothing else on stdout, so that a
// script reading stdout always reads an object. It is deferred with the
// command's error; a flag that does not parse is reported on stderr only,
// as every command's usage errors are.
func noVerdictJSON(err error, asJSON bool, out *printed) {
	var ce *cliflag.Error
	if !asJSON || out.n > 0 || !errors.As(err, &ce) || ce.Code != checker.ExitHarness {
		return
	}
	printJSON(out, harnessFailure{Verdict: "harness-failed", ExitCode: checker.ExitHarness, Error: err.Error()})
}

// printed is a writer that counts what went through it.
type printed struct {
	w io.Writer
	n int
}

func (p *printed) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += n
	return n, err
}

// verdictErr is a harness's exit for a verdict: nil when valid, else its
// exit code with what it means.
func verdictErr(v *checker.Verdict) error {
	switch v.ExitCode {
	case checker.ExitViolation:
		return withCode(v.ExitCode, errors.New("violations found"))
	case checker.ExitUnknown:
		return withCode(v.ExitCode, errors.New("no verdict: the checker timed out"))
	case checker.ExitInterrupted:
		return withCode(v.ExitCode, errors.New("interrupted: no violation in what was recorded before"))
	}
	return nil
}

// printVerdict prints the verdict and, last, where the reports are with
// the names of the files this run wrote there.
func printVerdict(v *checker.Verdict, out string, written []string, asJSON bool, stdout io.Writer) {
	if asJSON {
		printJSON(stdout, v)
		return
	}
	v.Summary(stdout)
	if out != "" {
		fmt.Fprintf(stdout, "\nreports in %s (%s)\n", out, reportdir.Describe(written))
	}
}

func runCheck(args []string, w, stderr io.Writer) (err error) {
	stdout := &printed{w: w}
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
	defer func() { noVerdictJSON(err, *asJSON, stdout) }()
	if len(pos) != 1 {
		return harnessErr(argErr(fs, "want exactly one HISTORY file"))
	}
	opts := checker.Options{Timeout: *timeout, LeaseTolerance: *tolerance, ClockOverride: *clockFaults}
	in := checker.Inputs{History: pos[0], Digests: *digests, Log: *logFile, Resolved: *resolved}
	events, err := in.Load(&opts)
	if err != nil {
		return harnessErr(err)
	}
	if *out != "" {
		if err := in.PrepareOut(*out); err != nil {
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

// parseHarness parses the flags of a harness command (chaos, check,
// sim): a bad flag exits 3, as the harness failing does, never as a
// verdict would.
func parseHarness(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	pos, _, err := parse(fs, args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
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

func runChaos(args []string, w, stderr io.Writer) (err error) {
	stdout := &printed{w: w}
	var f chaos.Flags
	fs := newFlagSet("chaos", chaos.Synopsis())
	f.RegisterFlags(fs)
	asJSON := fs.Bool("json", false, "print the verdict as JSON")
	if err := parseHarnessNoArgs(fs, args, stderr); err != nil {
		return err
	}
	defer func() { noVerdictJSON(err, *asJSON, stdout) }()
	cfg, err := f.Prepare()
	if err != nil {
		return harnessErr(err)
	}
	ctx, stop := untilInterrupted()
	defer stop()
	// Interrupted, the run winds down (the workload and the nemesis stop,
	// the cluster is healed and stopped, what was recorded is checked and
	// reported, exit 130); a second Ctrl-C then ends the process at once,
	// its members dying with it (procattr) and its history's lines whole.
	context.AfterFunc(ctx, stop)
	v, written, err := chaos.RunAndCheck(ctx, cfg, stderr)
	if err != nil {
		return harnessErr(err)
	}
	printVerdict(v, cfg.Out, written, *asJSON, stdout)
	return verdictErr(v)
}

// runSim runs one seed, or with --seeds a swarm of them; like chaos and
// check it exits 3 when it could not produce a verdict (bad flags
// included), so a failure of its own never reads as a verdict.
func runSim(args []string, w, stderr io.Writer) (err error) {
	stdout := &printed{w: w}
	var c swarm.Command
	fs, err := packageFlags("sim", swarm.Synopsis, c.RegisterFlags, parseHarnessNoArgs, args, stderr)
	if err != nil {
		return err
	}
	defer func() { noVerdictJSON(err, c.JSON(), stdout) }()
	many, err := c.Check()
	if err != nil {
		return harnessErr(err)
	}
	if !many {
		return c.RunSeed(stdout, stderr)
	}
	exe, err := os.Executable()
	if err != nil {
		return harnessErr(err)
	}
	ctx, stop := untilInterrupted()
	defer stop()
	return c.RunSwarm(ctx, exe, fs, stdout, stderr)
}

// runChaosClient is one workload client process of raftlock chaos
// --client-procs: its history events and store accesses go to the
// harness as JSON lines on stdout, answered on stdin.
func runChaosClient(args []string, stdout, stderr io.Writer) error {
	var f chaos.ClientFlags
	if _, err := packageFlags("chaos-client", chaos.ClientSynopsis, f.RegisterFlags, parseHarnessNoArgs, args, stderr); err != nil {
		return err
	}
	ctx, stop := untilInterrupted()
	defer stop()
	if err := f.RunClient(ctx, os.Stdin, stdout); err != nil {
		return harnessErr(err)
	}
	return nil
}

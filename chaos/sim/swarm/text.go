package swarm

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/sim"
	"github.com/raftlock/raftlock/checker"
)

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

// WriteText prints a swarm's totals as raftlock sim --seeds does.
func (s Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\n%-8s %-8s %-8s %-12s %-9s %-8s %-9s %-9s %s\n", "SEEDS", "VALID", "FAILING", "SIMULATED", "OPS", "FAULTS", "WALL", "SEEDS/S", "SPEEDUP")
	fmt.Fprintf(w, "%-8d %-8d %-8d %-12s %-9d %-8d %-9s %-9.1f %.0fx\n", s.Seeds, s.Valid, len(s.Failing)+len(s.Unknown)+len(s.Errors),
		fmt.Sprintf("%.0f s", s.SimSeconds), s.Ops, s.Faults, fmt.Sprintf("%.1f s", s.WallSeconds), s.SeedsPerSec, s.Speedup)
	if s.MembersRemoved+s.MembersAdded > 0 {
		fmt.Fprintf(w, "membership: %s removed, %d added, %d promoted\n", plural(s.MembersRemoved, "member", "members"), s.MembersAdded, s.MembersReplaced)
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
			plural(len(s.Interrupted), "seed", "seeds"), strings.Join(cut, " "), s.NotStarted)
	}
}

// plural is "1 op", "3 ops".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

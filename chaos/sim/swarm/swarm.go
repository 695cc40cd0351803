package swarm

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/chaos/progress"
	"github.com/raftlock/raftlock/checker"
)

// VerdictInterrupted is the verdict of a seed whose run Ctrl-C cut short:
// no verdict at all, never a failure; a chaos run cut short says the same.
const VerdictInterrupted = checker.VerdictInterrupted

// ExitInterrupted is an interrupted seed's exit code, as a shell reports
// SIGINT.
const ExitInterrupted = checker.ExitInterrupted

// Summary is a swarm's totals. Seeds counts the seeds that ran to
// the end; Interrupted lists those Ctrl-C cut short, NotStarted counts the
// rest of the range.
type Summary struct {
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

// Options say which seeds a swarm runs and how.
type Options struct {
	// Exe is the raftlock binary each seed runs in (raft's election
	// timeouts come from the process-global crypto/rand.Reader, which a
	// run replaces: one run per process). Args are the sim flags every
	// child gets besides --seed and --json; Env is its environment, nil
	// for this process's.
	Exe  string
	Args []string
	Env  []string
	// Lo..Hi are the seeds; Parallel how many run at once.
	Lo, Hi   uint64
	Parallel int
	// FailFast: start no seed after the first failing one.
	FailFast bool
	// Progress receives a line every two seconds; nil: none.
	Progress io.Writer
	// Failed, if set, is called once per failing seed as soon as it ends,
	// never twice at once.
	Failed func(SeedReport)
}

// Failing says whether a seed's report is a finding or an error (not a
// valid run, and not one Ctrl-C cut short).
func (r SeedReport) Failing() bool {
	return r.ExitCode != checker.ExitValid && r.Verdict != VerdictInterrupted
}

// Run runs the seeds of opt until they are done, ctx ends or, with
// FailFast, one fails. It returns the swarm's totals and the reports of
// the seeds that ran, in seed order.
func Run(ctx context.Context, opt Options) (Summary, []SeedReport) {
	total := int(opt.Hi - opt.Lo + 1)
	start := time.Now()
	p := &pool{opt: opt, results: make(map[uint64]SeedReport, total)}
	seeds := make(chan uint64)
	var wg sync.WaitGroup
	for range min(max(opt.Parallel, 1), total) {
		wg.Go(func() {
			for seed := range seeds {
				p.record(runChild(ctx, opt, seed))
			}
		})
	}
	stopProgress := p.progress(start, total)
dispatch:
	for seed := opt.Lo; seed <= opt.Hi; seed++ {
		if (opt.FailFast && p.anyFailed()) || ctx.Err() != nil {
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
	stopProgress()
	return summarize(p.results, total, time.Since(start).Seconds())
}

// pool collects the reports of a swarm's running seeds.
type pool struct {
	opt     Options
	mu      sync.Mutex
	results map[uint64]SeedReport
	failed  bool
}

func (p *pool) record(rep SeedReport) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results[rep.Seed] = rep
	if rep.Failing() {
		p.failed = true
		if p.opt.Failed != nil {
			p.opt.Failed(rep)
		}
	}
}

func (p *pool) anyFailed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// progress prints a line every two seconds until the returned func is
// called.
func (p *pool) progress(start time.Time, total int) (stop func()) {
	if p.opt.Progress == nil {
		return func() {}
	}
	return progress.Every(2*time.Second, func() {
		p.mu.Lock()
		finished, bad := len(p.results), 0
		var simS float64
		for _, r := range p.results {
			simS += r.SimSeconds
			if r.Failing() {
				bad++
			}
		}
		p.mu.Unlock()
		el := time.Since(start).Seconds()
		fmt.Fprintf(p.opt.Progress, "sim: %d/%d seeds, %d failing, %.1f seeds/s, %.0fx real time\n", finished, total, bad, float64(finished)/el, simS/el)
	})
}

// summarize adds up the reports of a swarm of total seeds that took wall
// seconds.
func summarize(results map[uint64]SeedReport, total int, wall float64) (Summary, []SeedReport) {
	sum := Summary{WallSeconds: wall, Failing: []int64{}, Unknown: []int64{}, Errors: []int64{}, Interrupted: []int64{},
		NotStarted: total - len(results)}
	reps := make([]SeedReport, 0, len(results))
	for _, r := range results {
		reps = append(reps, r)
	}
	slices.SortFunc(reps, func(a, b SeedReport) int { return cmp.Compare(a.Seed, b.Seed) })
	for _, r := range reps {
		s := int64(r.Seed)
		if r.Verdict == VerdictInterrupted {
			sum.Interrupted = append(sum.Interrupted, s)
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
			sum.Failing = append(sum.Failing, s)
			if sum.FirstFail == nil {
				sum.FirstFail, sum.FirstCheck = new(s), r.Check
			}
		case checker.ExitUnknown:
			sum.Unknown = append(sum.Unknown, s)
		default:
			sum.Errors = append(sum.Errors, s)
		}
	}
	if wall > 0 {
		sum.SeedsPerSec = float64(sum.Seeds) / wall
		sum.Speedup = sum.SimSeconds / wall
	}
	return sum, reps
}

// runChild runs one seed in a subprocess and reads its JSON line.
func runChild(ctx context.Context, opt Options, seed uint64) SeedReport {
	args := append([]string{"sim", "--seed", strconv.FormatUint(seed, 10), "--json"}, opt.Args...)
	cmd := exec.CommandContext(ctx, opt.Exe, args...)
	cmd.Env = opt.Env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var rep SeedReport
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
		return SeedReport{Seed: seed, Verdict: VerdictInterrupted, ExitCode: ExitInterrupted}
	}
	if !found {
		msg := strings.TrimSpace(errb.String())
		if err != nil {
			msg = strings.TrimSpace(err.Error() + ": " + msg)
		}
		return SeedReport{Seed: seed, Verdict: "error", ExitCode: checker.ExitHarness, Error: "no result: " + msg}
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

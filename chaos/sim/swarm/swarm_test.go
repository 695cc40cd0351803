package swarm

import (
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/sim"
	"github.com/raftlock/raftlock/checker"
)

// A replay line names the pipeline bound only when the seed would not
// draw it by itself, so that the line reruns exactly the run it came from.
func TestReplayNamesABoundTheSeedWouldNotDraw(t *testing.T) {
	cfg := sim.Config{Seed: 8, Nodes: 3, Duration: 10 * time.Second, Faults: []fault.Family{"kill"}}
	if got := Replay(cfg); strings.Contains(got, "--max-uncommitted") {
		t.Errorf("drawn bound: %s", got)
	}
	cfg.MaxUncommitted = sim.SeedMaxUncommitted(8)
	if got := Replay(cfg); strings.Contains(got, "--max-uncommitted") {
		t.Errorf("the seed's own bound, given: %s", got)
	}
	other := -1
	if cfg.MaxUncommitted == -1 {
		other = 4
	}
	cfg.MaxUncommitted = other
	if got := Replay(cfg); !strings.Contains(got, "--max-uncommitted "+itoa(other)) {
		t.Errorf("another bound: %s", got)
	}
}

func itoa(i int) string { return joinInts([]int{i}) }

// summarize counts each seed once, by its exit code, keeps interrupted
// seeds out of the totals and names the lowest failing seed first.
func TestSummarize(t *testing.T) {
	results := map[uint64]SeedReport{
		5: {Seed: 5, ExitCode: checker.ExitViolation, Check: "fencing", Ops: 10},
		3: {Seed: 3, ExitCode: checker.ExitViolation, Check: "audit", Ops: 10},
		1: {Seed: 1, ExitCode: checker.ExitValid, Ops: 10, SimSeconds: 10},
		2: {Seed: 2, ExitCode: checker.ExitUnknown},
		4: {Seed: 4, ExitCode: ExitInterrupted, Verdict: VerdictInterrupted, Ops: 99},
	}
	sum, reps := summarize(results, 7, 2)
	if sum.Seeds != 4 || sum.Valid != 1 || sum.NotStarted != 2 || sum.Ops != 30 {
		t.Errorf("totals %+v", sum)
	}
	if sum.FirstFail == nil || *sum.FirstFail != 3 || sum.FirstCheck != "audit" || len(sum.Failing) != 2 {
		t.Errorf("failing %v first %v %q", sum.Failing, sum.FirstFail, sum.FirstCheck)
	}
	if len(sum.Interrupted) != 1 || len(sum.Unknown) != 1 || sum.Speedup != 5 {
		t.Errorf("interrupted %v unknown %v speedup %v", sum.Interrupted, sum.Unknown, sum.Speedup)
	}
	for i, r := range reps {
		if r.Seed != uint64(i+1) {
			t.Fatalf("reports out of seed order: %v", reps)
		}
	}
}

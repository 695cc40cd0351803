package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker"
)

// expectValid fails the test, listing the violations, unless seed's
// verdict is valid.
func expectValid(t *testing.T, seed uint64, v *checker.Verdict) {
	t.Helper()
	if v.Valid {
		return
	}
	t.Errorf("seed %d: %s: first failing check %s", seed, v.Verdict, FailingCheck(v))
	for _, c := range v.Checks {
		for _, viol := range c.Violations {
			t.Logf("  %s: %s", c.Name, viol.Message)
		}
	}
}

// caughtWithBug runs cfg without the planted bug and with it: the first
// run must be valid, the second must fail want first. then looks at each
// result further.
func caughtWithBug(t *testing.T, cfg Config, bug, want string, then func(bug string, res *Result)) {
	t.Helper()
	for _, b := range []string{"", bug} {
		cfg.Bug = b
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w := ""
		if b != "" {
			w = want
		}
		if got := FailingCheck(Check(res, 30*time.Second)); got != w {
			t.Errorf("bug %q: first failing check %q, want %q (stats %+v)", b, got, w, res.Stats)
		}
		then(b, res)
	}
}

// TestSwarmIsValidAndEveryFaultFires runs 24 seeds with every
// fault family, faults coming often: every run must be valid, and over
// the swarm every family must have fired and the crash-safety paths must
// have been met (unsynced writes lost, I/O errors, slow syncs, restarts,
// snapshots taken and installed, duplicated and dropped messages).
func TestSwarmIsValidAndEveryFaultFires(t *testing.T) {
	total := Stats{Faults: map[fault.Family]int{}}
	for seed := uint64(1); seed <= 24; seed++ {
		res, err := Run(Config{Seed: seed, Duration: 8 * time.Second, Faults: Families,
			FaultInterval: 300 * time.Millisecond, FaultDuration: 800 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		v := Check(res, 30*time.Second)
		expectValid(t, seed, v)
		st := res.Stats
		if st.OK == 0 {
			t.Errorf("seed %d: no operation succeeded", seed)
		}
		for f, n := range st.Faults {
			total.Faults[f] += n
		}
		total.LostWrites += st.LostWrites
		total.IOErrors += st.IOErrors
		total.SlowSyncs += st.SlowSyncs
		total.Restarts += st.Restarts
		total.Snapshots += st.Snapshots
		total.Installed += st.Installed
		total.Duplicated += st.Duplicated
		total.Dropped += st.Dropped
		total.CrashAfterSnapshot += st.CrashAfterSnapshot
		total.CrashAfterInstall += st.CrashAfterInstall
		total.CrashAtGrantCommit += st.CrashAtGrantCommit
		total.UnawareLeaders += st.UnawareLeaders
	}
	for _, f := range Families {
		if total.Faults[f] == 0 {
			t.Errorf("fault family %s never fired (%v)", f, total.Faults)
		}
	}
	for name, n := range map[string]int{"unsynced writes lost": total.LostWrites, "I/O errors": total.IOErrors,
		"slow syncs": total.SlowSyncs, "restarts": total.Restarts, "snapshots": total.Snapshots,
		"snapshot installs": total.Installed, "duplicated messages": total.Duplicated, "dropped messages": total.Dropped,
		"crashes right after a snapshot": total.CrashAfterSnapshot, "crashes right after an install": total.CrashAfterInstall,
		"crashes as a grant commits": total.CrashAtGrantCommit, "leaders isolated unaware": total.UnawareLeaders} {
		if n == 0 {
			t.Errorf("no %s over the swarm", name)
		}
	}
	t.Logf("faults %v, %+v", total.Faults, total)
}

// TestClockFollowsRateAndNeverRunsBackwards: the simulated clock has the
// semantics of clock.Skew (node/clock).
func TestClockFollowsRateAndNeverRunsBackwards(t *testing.T) {
	c := newSimClock(1000)
	if got := c.read(2000); got != 2000 {
		t.Fatalf("rate 1: %d", got)
	}
	c.set(2000, 2, 0)
	if got := c.read(3000); got != 4000 {
		t.Fatalf("rate 2: %d, want 4000", got)
	}
	if got := c.interval(10); got != 5 {
		t.Fatalf("interval at rate 2: %d, want 5", got)
	}
	c.set(3000, 1, -1500)
	if got := c.read(3500); got != 4000 {
		t.Fatalf("after a backward jump the clock stands still: %d, want 4000", got)
	}
	if got := c.read(5000); got != 4500 {
		t.Fatalf("then runs again: %d, want 4500", got)
	}
	c.set(5000, 1, 700)
	if got := c.read(5000); got != 5200 {
		t.Fatalf("a forward jump adds to the reading: %d, want 5200", got)
	}
}

func TestBadConfigIsRefused(t *testing.T) {
	for _, cfg := range []Config{
		{Seed: 1, Nodes: 4},
		{Seed: 1, Faults: []fault.Family{"meteor"}},
		{Seed: 1, Bug: "no-such-bug"},
		{Seed: 1, Bug: "no-snapshot-on-add"},
		{Seed: 1, Bug: "no-peer-input-checks"},
		{Seed: 1, MaxOps: -1},
	} {
		if _, err := Run(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// TestPlantedBugsAreCaught: a few planted bugs, each caught at an early
// seed by the check that sees it: a panicking restart through
// Options.Crashes (the panic recovered around the call into the member), a
// divergent apply by the state machine safety check, early expiry by
// lease timing. (At seed 1 follower-local-expire shows as a digest
// mismatch first.)
func TestPlantedBugsAreCaught(t *testing.T) {
	for bug, c := range map[string]struct {
		seed uint64
		want string
	}{
		"commit-not-persisted":  {2, "member-crashes"},
		"follower-local-expire": {2, SafetyCheck},
		"early-expire":          {1, "lease-timing"},
	} {
		want := c.want
		res, err := Run(Config{Seed: c.seed, Duration: 5 * time.Second, Faults: Families, Bug: bug})
		if err != nil {
			t.Fatal(err)
		}
		v := Check(res, 30*time.Second)
		if got := FailingCheck(v); got != want || v.ExitCode != 1 {
			t.Errorf("%s: first failing check %q (exit %d), want %q", bug, got, v.ExitCode, want)
		}
		if want == "member-crashes" && len(res.Crashes) == 0 {
			t.Errorf("%s: no crash reported", bug)
		}
		if want == SafetyCheck && len(res.Safety) == 0 {
			t.Errorf("%s: no safety violation reported", bug)
		}
	}
}

// TestMaxAndSkipFaults: the knobs shrinking turns bound and thin the
// fault schedule; a skipped fault keeps its turn, so the ones before it
// are the same faults at the same times.
func TestMaxAndSkipFaults(t *testing.T) {
	count := func(st Stats) (n int) {
		for _, v := range st.Faults {
			n += v
		}
		return n
	}
	firstNemesis := func(res *Result) string {
		for _, e := range res.Events {
			if e.Process < 0 {
				return fmt.Sprintf("%d %s %v", e.Time, e.F, valueString(e.Value))
			}
		}
		return ""
	}
	base := Config{Seed: 4, Duration: 7 * time.Second, Faults: Families, MaxFaults: 3}
	full, err := Run(base)
	if err != nil {
		t.Fatal(err)
	}
	skip := base
	skip.SkipFaults = []int{2}
	thin, err := Run(skip)
	if err != nil {
		t.Fatal(err)
	}
	if count(full.Stats) != 3 || count(thin.Stats) != 2 {
		t.Fatalf("faults %v and %v, want 3 and 2", full.Stats.Faults, thin.Stats.Faults)
	}
	if a, b := firstNemesis(full), firstNemesis(thin); a != b || a == "" {
		t.Fatalf("first fault %q, with the second skipped %q", a, b)
	}
}

// TestPipelineBoundMasksAMissingTermBarrier: a leader bounded to the
// default two uncommitted entries cannot decide while an old term's tail
// and its own first entry are both uncommitted, so the bound often does
// the term barrier's work: seed 102 reaches the planted bug only without
// a bound. (Not always: since the simulated client retries an overloaded
// call, 5 of seeds 1..200 reach it with the bound, 7 without;
// results/sim.md.) This is why a run draws its bound from the seed.
func TestPipelineBoundMasksAMissingTermBarrier(t *testing.T) {
	for _, c := range []struct {
		bound int
		exit  int
	}{{-1, 1}, {2, 0}} {
		res, err := Run(Config{Seed: 102, Duration: 10 * time.Second, Faults: Families, Bug: "no-term-barrier", MaxUncommitted: c.bound})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Header["max_uncommitted"]; got != c.bound {
			t.Errorf("bound %d: header max_uncommitted %v", c.bound, got)
		}
		if v := Check(res, 30*time.Second); v.ExitCode != c.exit {
			t.Errorf("bound %d: exit %d (%s), want %d", c.bound, v.ExitCode, FailingCheck(v), c.exit)
		}
	}
	seen := map[int]bool{}
	for seed := range uint64(50) {
		seen[SeedMaxUncommitted(seed)] = true
	}
	if len(seen) != 4 {
		t.Errorf("50 seeds drew the bounds %v, want 2, 1, 4 and none", seen)
	}
}

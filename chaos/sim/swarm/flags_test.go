package swarm

import (
	"errors"
	"flag"
	"slices"
	"testing"

	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/internal/cliflag"
)

func parseCommand(t *testing.T, args ...string) (*Command, *flag.FlagSet, bool, error) {
	t.Helper()
	var c Command
	fs, err := cliflag.Parse(&c, "sim", args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	many, err := c.Check()
	return &c, fs, many, err
}

func TestCheckRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--duration", "0s"}, "--duration must be positive"},
		{[]string{"--clients", "0"}, "--clients must be at least 1"},
		{[]string{"--nodes", "4"}, "--nodes must be 3 or 5"},
		{[]string{"--parallel", "0"}, "--parallel must be at least 1"},
		{[]string{"--seeds", "1..2", "--seed", "3"}, "--seed and --seeds exclude each other"},
		{[]string{"--seeds", "1..2", "--shrink"}, "--shrink works on one seed: rerun the failing seed with --seed N --shrink"},
		{[]string{"--seeds", "5..2"}, `--seeds "5..2": want A..B with A <= B, e.g. 1..100`},
	} {
		if _, _, _, err := parseCommand(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A swarm's children get every flag set but the swarm's own, and an
// environment without the variables that would make each a swarm.
func TestChildrenGetTheRunsFlagsOnly(t *testing.T) {
	c, fs, many, err := parseCommand(t, "--seeds", "1..3", "--parallel", "2", "--json", "--faults", "none", "--clients", "2")
	if err != nil || !many || c.lo != 1 || c.hi != 3 || len(c.Config.Faults) != 0 {
		t.Fatalf("Check: %v, swarm %v, seeds %d..%d, faults %v", err, many, c.lo, c.hi, c.Config.Faults)
	}
	if got, want := c.childArgs(fs), []string{"--clients=2", "--faults=none", "--out=sim-out"}; !slices.Equal(got, want) {
		t.Errorf("child args %q, want %q", got, want)
	}
	env := childEnv([]string{"RAFTLOCK_SEEDS=1..3", "RAFTLOCK_JSON=true", "RAFTLOCK_FAIL_FAST=1", "HOME=/h"})
	if want := []string{"RAFTLOCK_JSON=true", "HOME=/h"}; !slices.Equal(env, want) {
		t.Errorf("child env %q, want %q", env, want)
	}
	c, _, many, err = parseCommand(t, "--seed", "9")
	if err != nil || many || c.Config.Seed != 9 {
		t.Fatalf("one seed: %v, swarm %v, seed %d", err, many, c.Config.Seed)
	}
}

// A violation found before Ctrl-C is a finding; an interruption alone is
// not; then the simulator's failures, then seeds without a verdict.
func TestSummaryExit(t *testing.T) {
	first := int64(4)
	for _, tc := range []struct {
		sum         Summary
		interrupted bool
		code        int
	}{
		{Summary{Seeds: 3, Valid: 3}, false, 0},
		{Summary{Failing: []int64{4}, FirstFail: &first, FirstCheck: "linearizable", Interrupted: []int64{5}}, true, checker.ExitViolation},
		{Summary{Interrupted: []int64{5}}, false, ExitInterrupted},
		{Summary{}, true, ExitInterrupted},
		{Summary{Errors: []int64{2}, Unknown: []int64{3}}, false, checker.ExitHarness},
		{Summary{Unknown: []int64{3}}, false, checker.ExitUnknown},
	} {
		err := tc.sum.exit(tc.interrupted)
		var ce *cliflag.Error
		if code := 0; errors.As(err, &ce) {
			code = ce.Code
			if code != tc.code {
				t.Errorf("%+v: exit %d (%v), want %d", tc.sum, code, err, tc.code)
			}
		} else if tc.code != 0 || err != nil {
			t.Errorf("%+v: %v, want exit %d", tc.sum, err, tc.code)
		}
	}
}

package swarm

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/sim"
)

// Shrink searches smaller runs of the same seed that still fail with the
// same check, printing its progress to log: fewer fault families, fewer
// faults, fewer clients, fewer operations, a shorter duration. Each step
// keeps a reduction only if the run still fails the same way, so the
// result always reproduces. The smallest run's report goes to
// out/seed-N-shrunk.
func Shrink(cfg sim.Config, check string, timeout time.Duration, out string, log io.Writer) (*ShrinkReport, error) {
	fmt.Fprintf(log, "sim: shrinking seed %d (%s)...\n", cfg.Seed, check)
	s := &shrinker{check: check, timeout: timeout}
	if err := s.pin(cfg); err != nil {
		return nil, err
	}
	for _, step := range []func() error{s.dropFamilies, s.shrinkCounts, s.shrinkCounts, s.noFaultsLeft} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	best := s.best
	// Skips past the last fault mean nothing: leave them out.
	best.SkipFaults = slices.DeleteFunc(slices.Sorted(slices.Values(best.SkipFaults)), func(i int) bool { return i > best.MaxFaults })
	if len(best.SkipFaults) == 0 {
		best.SkipFaults = nil
	}
	sr := &ShrinkReport{Check: check, Duration: best.Duration.String(), MaxOps: best.MaxOps, MaxFaults: best.MaxFaults, Skip: best.SkipFaults,
		Clients: best.Clients, Faults: fault.Join(best.Faults), Runs: s.runs, Replay: Replay(best)}
	if sr.Faults == "" {
		sr.Faults = "none"
	}
	res, v, err := Simulate(best, timeout)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(out, fmt.Sprintf("seed-%d-shrunk", cfg.Seed))
	if err := WriteReport(dir, best, res, v, timeout); err != nil {
		return nil, err
	}
	sr.Report = dir
	return sr, nil
}

// shrinker is one search: the smallest failing run found so far.
type shrinker struct {
	check   string
	timeout time.Duration
	best    sim.Config
	runs    int
}

// fails runs c and says whether it fails with the check being shrunk.
func (s *shrinker) fails(c sim.Config) (bool, *sim.Result, error) {
	s.runs++
	if c.Validate() != nil {
		// A run the simulator refuses (the planted bug needs the family
		// just dropped) cannot fail the same way.
		return false, nil, nil
	}
	res, v, err := Simulate(c, s.timeout)
	if err != nil {
		return false, nil, err
	}
	return sim.FailingCheck(v) == s.check, res, nil
}

// try keeps c if it still fails the same way.
func (s *shrinker) try(c sim.Config) (bool, error) {
	ok, _, err := s.fails(c)
	if ok {
		s.best = c
	}
	return ok, err
}

// pin reruns the failing run and pins the counts it had, so later cuts
// start from them.
func (s *shrinker) pin(cfg sim.Config) error {
	ok, res, err := s.fails(cfg)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("shrink: the failing run did not fail again (not deterministic?)")
	}
	s.best = cfg
	s.best.MaxOps = res.Stats.Invoked
	injected := 0
	for _, n := range res.Stats.Faults {
		injected += n
	}
	s.best.MaxFaults = injected
	return nil
}

// dropFamilies drops each fault family that is not needed, then tries no
// faults at all.
func (s *shrinker) dropFamilies() error {
	for _, fam := range slices.Clone(s.best.Faults) {
		c := s.best
		c.Faults = slices.DeleteFunc(slices.Clone(s.best.Faults), func(f fault.Family) bool { return f == fam })
		if _, err := s.try(c); err != nil {
			return err
		}
	}
	if len(s.best.Faults) == 0 {
		s.best.MaxFaults = 0
		return nil
	}
	c := s.best
	c.Faults, c.MaxFaults = []fault.Family{}, 0
	_, err := s.try(c)
	return err
}

// shrinkCounts lowers the fault, client and operation counts and the
// duration, then tries each remaining fault alone: is it needed?
func (s *shrinker) shrinkCounts() error {
	steps := []struct {
		get func(sim.Config) int
		set func(*sim.Config, int)
	}{
		{func(c sim.Config) int { return c.MaxFaults }, func(c *sim.Config, v int) { c.MaxFaults = v }},
		{func(c sim.Config) int { return c.Clients }, func(c *sim.Config, v int) { c.Clients = v }},
		{func(c sim.Config) int { return c.MaxOps }, func(c *sim.Config, v int) { c.MaxOps = v }},
		{func(c sim.Config) int { return int(c.Duration / time.Second) }, func(c *sim.Config, v int) { c.Duration = time.Duration(v) * time.Second }},
	}
	for _, st := range steps {
		if err := s.shrinkInt(st.get, st.set); err != nil {
			return err
		}
	}
	for i := 1; i <= s.best.MaxFaults && len(s.best.Faults) > 0; i++ {
		if slices.Contains(s.best.SkipFaults, i) {
			continue
		}
		c := s.best
		c.SkipFaults = append(slices.Clone(s.best.SkipFaults), i)
		if _, err := s.try(c); err != nil {
			return err
		}
	}
	return nil
}

// shrinkInt lowers one count down to 1: halving, then by a quarter, then
// one at a time, while the run still fails.
func (s *shrinker) shrinkInt(get func(sim.Config) int, set func(*sim.Config, int)) error {
	const floor = 1
	for get(s.best) > floor {
		cur := get(s.best)
		moved := false
		for _, next := range []int{floor + (cur-floor)/2, cur * 3 / 4, cur - 1} {
			if next < floor || next >= cur {
				continue
			}
			c := s.best
			set(&c, next)
			ok, err := s.try(c)
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

// noFaultsLeft: with every fault skipped, say so plainly if that still
// fails.
func (s *shrinker) noFaultsLeft() error {
	if s.best.MaxFaults == 0 || len(s.best.SkipFaults) < s.best.MaxFaults {
		return nil
	}
	c := s.best
	c.Faults, c.MaxFaults, c.SkipFaults = []fault.Family{}, 0, nil
	_, err := s.try(c)
	return err
}

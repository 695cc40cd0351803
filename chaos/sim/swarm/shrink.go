package swarm

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/sim"
)

// Shrink searches smaller runs of the same seed that still fail with the
// same check, printing its progress to log: fewer fault families, fewer faults, fewer clients, fewer
// operations, a shorter duration. Each step keeps a reduction only if the
// run still fails the same way, so the result always reproduces.
func Shrink(cfg sim.Config, check string, timeout time.Duration, out string, log io.Writer) (*ShrinkReport, error) {
	fmt.Fprintf(log, "sim: shrinking seed %d (%s)...\n", cfg.Seed, check)
	runs := 0
	fails := func(c sim.Config) (bool, *sim.Result, error) {
		runs++
		if c.Validate() != nil {
			// A run the simulator refuses (the planted bug needs the
			// family just dropped) cannot fail the same way.
			return false, nil, nil
		}
		res, v, err := Simulate(c, timeout)
		if err != nil {
			return false, nil, err
		}
		return sim.FailingCheck(v) == check, res, nil
	}
	// Pin the counts the failing run had, so later cuts start from it.
	ok, res, err := fails(cfg)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("shrink: the failing run did not fail again (not deterministic?)")
	}
	best := cfg
	best.MaxOps = res.Stats.Invoked
	injected := 0
	for _, n := range res.Stats.Faults {
		injected += n
	}
	best.MaxFaults = injected
	try := func(c sim.Config) (bool, error) {
		ok, _, err := fails(c)
		if ok {
			best = c
		}
		return ok, err
	}
	// Families: drop each one that is not needed.
	for _, fam := range slices.Clone(best.Faults) {
		c := best
		c.Faults = slices.DeleteFunc(slices.Clone(best.Faults), func(s string) bool { return s == fam })
		if _, err := try(c); err != nil {
			return nil, err
		}
	}
	if len(best.Faults) == 0 {
		best.MaxFaults = 0
	} else {
		// No faults at all?
		c := best
		c.Faults, c.MaxFaults = []string{}, 0
		if _, err := try(c); err != nil {
			return nil, err
		}
	}
	// Counts: halve, then step down linearly near the end.
	shrinkInt := func(get func(sim.Config) int, set func(*sim.Config, int), floor int) error {
		for get(best) > floor {
			cur := get(best)
			moved := false
			for _, next := range []int{floor + (cur-floor)/2, cur * 3 / 4, cur - 1} {
				if next < floor || next >= cur {
					continue
				}
				c := best
				set(&c, next)
				ok, err := try(c)
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
	steps := []struct {
		get   func(sim.Config) int
		set   func(*sim.Config, int)
		floor int
	}{
		{func(c sim.Config) int { return c.MaxFaults }, func(c *sim.Config, v int) { c.MaxFaults = v }, 1},
		{func(c sim.Config) int { return c.Clients }, func(c *sim.Config, v int) { c.Clients = v }, 1},
		{func(c sim.Config) int { return c.MaxOps }, func(c *sim.Config, v int) { c.MaxOps = v }, 1},
		{func(c sim.Config) int { return int(c.Duration / time.Second) }, func(c *sim.Config, v int) { c.Duration = time.Duration(v) * time.Second }, 1},
	}
	for round := 0; round < 2; round++ {
		for _, st := range steps {
			if err := shrinkInt(st.get, st.set, st.floor); err != nil {
				return nil, err
			}
		}
		// Then each remaining fault alone: is it needed?
		for i := 1; i <= best.MaxFaults && len(best.Faults) > 0; i++ {
			if slices.Contains(best.SkipFaults, i) {
				continue
			}
			c := best
			c.SkipFaults = append(slices.Clone(best.SkipFaults), i)
			if _, err := try(c); err != nil {
				return nil, err
			}
		}
	}
	// Every fault skipped: say so plainly, if that still fails.
	if best.MaxFaults > 0 && len(best.SkipFaults) >= best.MaxFaults {
		c := best
		c.Faults, c.MaxFaults, c.SkipFaults = []string{}, 0, nil
		if _, err := try(c); err != nil {
			return nil, err
		}
	}
	// Skips past the last fault mean nothing: leave them out.
	best.SkipFaults = slices.DeleteFunc(slices.Sorted(slices.Values(best.SkipFaults)), func(i int) bool { return i > best.MaxFaults })
	if len(best.SkipFaults) == 0 {
		best.SkipFaults = nil
	}
	sr := &ShrinkReport{Check: check, Duration: best.Duration.String(), MaxOps: best.MaxOps, MaxFaults: best.MaxFaults, Skip: best.SkipFaults,
		Clients: best.Clients, Faults: strings.Join(best.Faults, ","), Runs: runs, Replay: Replay(best)}
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

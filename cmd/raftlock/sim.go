package main

import (
	"io"
	"os"

	"github.com/raftlock/raftlock/chaos/sim/swarm"
)

// runSim runs one seed, or with --seeds a swarm of them; like chaos and
// check it exits 3 when it could not produce a verdict (bad flags
// included), so a failure of its own never reads as a verdict.
func runSim(args []string, stdout, stderr io.Writer) error {
	var c swarm.Command
	fs := newFlagSet("sim", swarm.Synopsis)
	c.RegisterFlags(fs)
	if err := parseHarnessNoArgs(fs, args, stderr); err != nil {
		return err
	}
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

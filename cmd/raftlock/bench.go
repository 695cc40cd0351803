package main

import (
	"io"
	"strings"

	"github.com/raftlock/raftlock/bench"
)

func runBench(args []string, stdout, stderr io.Writer) error {
	var c bench.Command
	if _, err := packageFlags("bench", bench.Synopsis, c.RegisterFlags, parseNoArgs, args, stderr); err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return err
	}
	ctx, stop := untilInterrupted()
	defer stop()
	return c.Run(ctx, stop, "raftlock bench "+strings.Join(args, " "), stdout, stderr)
}

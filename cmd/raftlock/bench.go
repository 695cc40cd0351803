package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

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
	// A reader that goes away (bench ... | head) stops the bench as Ctrl-C
	// does: it still stops the members it started and removes its data
	// directory (a gigabyte at a million held), where SIGPIPE would kill it
	// first. Its writes to the closed pipe then fail instead.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()
	return c.Run(ctx, stop, "raftlock bench "+strings.Join(args, " "), stdout, stderr)
}

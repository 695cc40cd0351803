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
	fs := newFlagSet("bench", bench.Synopsis)
	c.RegisterFlags(fs)
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return c.Run(ctx, stop, "raftlock bench "+strings.Join(args, " "), stdout, stderr)
}

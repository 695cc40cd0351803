package main

import (
	"context"
	"errors"
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
	// first. SIGPIPE is ignored, so the write fails with EPIPE, and that
	// failure stops the run. (Notify for SIGPIPE would not do: it then
	// catches a write to any broken descriptor, a socket to a member the
	// bench just killed among them, and ended runs as interrupted.)
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return c.Run(ctx, stop, "raftlock bench "+strings.Join(args, " "), stopOnEPIPE{stdout, stop}, stopOnEPIPE{stderr, stop})
}

// stopOnEPIPE is w, whose write to a closed pipe calls stop.
type stopOnEPIPE struct {
	w    io.Writer
	stop func()
}

func (s stopOnEPIPE) Write(b []byte) (int, error) {
	n, err := s.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		s.stop()
	}
	return n, err
}

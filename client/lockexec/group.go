package lockexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/internal/procstat"
)

// processGroup stops what is left of a command's process group.
type processGroup struct {
	pgid      int
	killAfter time.Duration
	sigs      <-chan os.Signal // a further signal kills at once
	lost      <-chan struct{}  // so does losing the lock (nil: already lost)
	note      string           // why the group is stopped, when the command itself is gone
	stderr    io.Writer
}

// stop sends SIGTERM to the group, SIGKILL after killAfter (at once on a
// further signal or when the lock is lost meanwhile), and returns when no
// process of the group runs. It gives up, with an error, only when
// processes survive SIGKILL for killAfter (at least OutputDrain): stuck
// in the kernel, or not ours to kill.
func (g *processGroup) stop() error {
	if len(g.members()) == 0 {
		return nil
	}
	if g.note != "" {
		fmt.Fprintf(g.stderr, "raftlock exec: %s; stopping what it left running in its process group\n", g.note)
	}
	syscall.Kill(-g.pgid, syscall.SIGTERM)
	grace := time.NewTimer(g.killAfter)
	defer grace.Stop()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	var killedAt time.Time
	kill := func() {
		if killedAt.IsZero() {
			killedAt = time.Now()
		}
		syscall.Kill(-g.pgid, syscall.SIGKILL)
	}
	for {
		select {
		case <-tick.C:
		case <-grace.C:
			kill()
		case <-g.sigs:
			kill()
		case <-g.lost:
			g.lost = nil
			fmt.Fprintf(g.stderr, "raftlock exec: lost the lock; killing what is left of the process group\n")
			kill()
		}
		left := g.members()
		if len(left) == 0 {
			return nil
		}
		if !killedAt.IsZero() {
			if time.Since(killedAt) > max(g.killAfter, OutputDrain) {
				return fmt.Errorf("processes %v of the command's group survive SIGKILL", left)
			}
			kill() // again: a child forked meanwhile gets it too
		}
	}
}

// members lists the processes of the group that still run. A zombie does
// not count: it runs nothing, and in a container nobody may ever reap an
// orphan's. Without /proc it falls back on kill(-pgid, 0), which counts
// zombies too.
func (g *processGroup) members() []int {
	if err := syscall.Kill(-g.pgid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	pids, err := procstat.Group(g.pgid)
	if err != nil {
		return []int{g.pgid}
	}
	return pids
}

// outputCopy is a pipe the command writes into and exec copies from. Not
// os/exec's own: its Wait waits for the pipe to close, which a background
// child holding it would delay past the command's exit, and exec must see
// that exit at once to stop the rest of the group.
type outputCopy struct {
	r, w *os.File
	done chan struct{}
}

type outputCopies []*outputCopy

func newOutputCopies(dsts ...io.Writer) (outputCopies, error) {
	var outs outputCopies
	for _, dst := range dsts {
		r, w, err := os.Pipe()
		if err != nil {
			outs.close()
			return nil, fmt.Errorf("pipe for the command's output: %w", err)
		}
		c := &outputCopy{r: r, w: w, done: make(chan struct{})}
		go func() {
			defer close(c.done)
			io.Copy(dst, r)
		}()
		outs = append(outs, c)
	}
	return outs, nil
}

// started closes exec's end of the write side: the copy ends once the
// command's processes have closed theirs.
func (outs outputCopies) started() {
	for _, c := range outs {
		c.w.Close()
	}
}

// finish waits up to timeout for the copies to drain, then cuts them.
func (outs outputCopies) finish(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, c := range outs {
		select {
		case <-c.done:
		case <-ctx.Done():
		}
		c.r.Close()
		<-c.done
	}
}

func (outs outputCopies) close() {
	for _, c := range outs {
		c.w.Close()
		c.r.Close()
		<-c.done
	}
}

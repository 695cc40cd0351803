package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
)

// execSynopsis is exec's usage line, also the answer to a command given
// without "--" before it.
const execSynopsis = "raftlock exec KEY [flags] -- COMMAND [ARGS...]"

const (
	// groupPoll is how often exec looks whether its command's process
	// group is empty yet.
	groupPoll = 20 * time.Millisecond
	// outputDrain bounds the wait for the command's output once its group
	// is gone: only a process that left the group can still hold the pipe.
	outputDrain = 2 * time.Second
)

func runExec(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("exec", "exec KEY [--lease 10s] [--wait 30s] [--kill-after 5s] [--owner TEXT] -- COMMAND [ARGS...]\n\n"+
		"Runs COMMAND holding the lock, with RAFTLOCK_TOKEN (its fencing token) and RAFTLOCK_LOCK_KEY\n"+
		"in its environment, renewing the lease every third of it. Exits with COMMAND's status\n"+
		"(128+n when signal n ended it; 127 not found, 126 not runnable), 1 when the lock was lost,\n"+
		"3 when --wait ran out, 128+n when signal n came while waiting (nothing ran).")
	var cf clientFlags
	cf.register(fs, false)
	lease := fs.Duration("lease", 10*time.Second, "lease length, renewed every third of it")
	wait := fs.Duration("wait", 30*time.Second, "queue for the lock this long")
	killAfter := fs.Duration("kill-after", 5*time.Second,
		"when the command ends (or the lock is lost), SIGTERM whatever of its process group\n"+
			"still runs, and SIGKILL it after this long; the lock is released only once nothing\n"+
			"of the group runs")
	owner := ownerFlag(fs)
	fs.Lookup("timeout").Usage += " (after --wait)"
	pos, rest, err := parse(fs, args, stderr)
	if !slices.Contains(args, "--") && !errors.Is(err, flag.ErrHelp) {
		// Without "--" the command's own flags (sh -c) read as unknown
		// flags of exec's; say what is missing instead.
		if err == nil || strings.Contains(err.Error(), "flag provided but not defined") {
			return usageErr("the command must follow --: %s", execSynopsis)
		}
	}
	if err != nil {
		return err
	}
	if len(pos) != 1 || len(rest) == 0 {
		return argErr(fs, "want KEY -- COMMAND [ARGS...]")
	}
	if *killAfter < 0 {
		return argErr(fs, "--kill-after must not be negative, got %v", *killAfter)
	}
	if err := checkOwner(owner, fs); err != nil {
		return err
	}
	key := pos[0]
	// Find the command before taking the lock: a typo must not hold a
	// lock, and it exits as a shell would.
	path, err := exec.LookPath(rest[0])
	if err != nil {
		code := exitNotFound
		if errors.Is(err, os.ErrPermission) {
			code = exitCannotRun
		}
		return withCode(code, fmt.Errorf("%s: %w", rest[0], err))
	}
	cl, err := cf.clientAs(*owner)
	if err != nil {
		return err
	}
	defer cl.Close()
	// The signals a terminal or a supervisor sends are caught from here
	// on: while exec waits for the lock they give the wait up; once the
	// command runs they are passed on to it, never left to end exec, which
	// ends only after the command's whole group has. Notify also catches a
	// SIGINT exec was started with ignored (a script's &).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithTimeout(context.Background(), *wait+cf.timeout)
	lk, err := untilSignal(ctx, sigs, func(ctx context.Context) (*client.Locker, error) {
		return cl.Lock(ctx, key, *lease, *wait)
	}, func(lk *client.Locker) {
		uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ucancel()
		lk.Unlock(uctx)
	})
	cancel()
	var se signalError
	if errors.As(err, &se) {
		return withCode(128+int(se.sig), fmt.Errorf("%v while waiting for the lock on %s: nothing ran", se.sig, key))
	}
	if err != nil {
		return clientErr(cf.timedOut(err))
	}
	// The command's output and exec's own messages share the writers.
	stdout, stderr = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	outs, err := newOutputCopies(stdout, stderr)
	if err != nil {
		lk.Unlock(context.Background())
		return err
	}
	cmd := exec.Command(path, rest[1:]...)
	cmd.Args[0] = rest[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, outs[0].w, outs[1].w
	// RAFTLOCK_LOCK_KEY, not RAFTLOCK_KEY: that one is --key (the TLS
	// private key) of every raftlock command the job itself runs.
	cmd.Env = append(os.Environ(), fmt.Sprintf("RAFTLOCK_TOKEN=%d", lk.Token()), "RAFTLOCK_LOCK_KEY="+key)
	// Its own process group, so that stopping the command stops everything
	// it started: nothing may keep using the resource once the lock is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		outs.close()
		lk.Unlock(context.Background())
		return fmt.Errorf("start %s: %w", rest[0], err)
	}
	outs.started()
	pgid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var lostErr, waitErr error
	mainDone := false
wait:
	for {
		select {
		case waitErr = <-exited:
			mainDone = true
			break wait
		case s := <-sigs:
			syscall.Kill(-pgid, s.(syscall.Signal))
		case <-lk.Lost():
			lostErr = lk.Err()
			fmt.Fprintf(stderr, "raftlock exec: lost the lock on %s (%v); stopping %s\n", key, lostErr, rest[0])
			break wait
		}
	}
	// Whatever ended the wait, nothing of the command may outlive exec's
	// hold: a background child of a shell that exited (or was
	// interrupted) still uses the resource the lock guards.
	g := processGroup{pgid: pgid, killAfter: *killAfter, sigs: sigs, stderr: stderr}
	if mainDone {
		g.lost = lk.Lost()
		g.note = fmt.Sprintf("%s exited", rest[0])
	}
	if err := g.stop(); err != nil {
		// Not released: the lease runs out on its own once exec stops
		// renewing, and by then SIGKILL has had its time.
		return withCode(exitError, fmt.Errorf("%w; the lock on %s is left to expire", err, key))
	}
	if !mainDone {
		// The group is empty, so the command is gone, unless it moved to
		// another group: it must not outlive the hold either.
		select {
		case waitErr = <-exited:
		default:
			cmd.Process.Kill() // a no-op on a command that has just exited
			waitErr = <-exited
		}
	}
	outs.finish(outputDrain)
	if lostErr == nil {
		select {
		case <-lk.Lost():
			lostErr = lk.Err() // lost while the group was being stopped
		default:
		}
	}
	if lostErr != nil {
		return withCode(exitError, fmt.Errorf("lost the lock on %s while %s ran", key, rest[0]))
	}
	rctx, rcancel := context.WithTimeout(context.Background(), cf.timeout)
	defer rcancel()
	if err := lk.Unlock(rctx); err != nil {
		fmt.Fprintf(stderr, "raftlock exec: release %s: %v\n", key, err)
	}
	return commandStatus(waitErr)
}

// commandStatus is exec's exit for the command's end: its exit status, or
// 128+n for a death by signal n, as a shell reports it.
func commandStatus(waitErr error) error {
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else if code < 0 {
			code = exitError
		}
		return withCode(code, errors.New(""))
	}
	return waitErr
}

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
// processes survive SIGKILL for killAfter (at least outputDrain): stuck
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
			if time.Since(killedAt) > max(g.killAfter, outputDrain) {
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
	pids, err := groupMembers(g.pgid)
	if err != nil {
		return []int{g.pgid}
	}
	return pids
}

// groupMembers reads /proc for the processes of group pgid that are not
// zombies.
func groupMembers(pgid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold anything, ')' too.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
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

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

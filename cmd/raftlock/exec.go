package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func runExec(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("exec", "exec KEY [--lease 10s] [--wait 30s] -- CMD ARGS...")
	var cf clientFlags
	cf.register(fs, false)
	lease := fs.Duration("lease", 10*time.Second, "lease length, renewed every third of it")
	wait := fs.Duration("wait", 30*time.Second, "queue for the lock this long")
	fs.Lookup("timeout").Usage += " (after --wait)"
	pos, rest, err := parse(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 || len(rest) == 0 {
		return argErr(fs, "want KEY -- CMD ARGS...")
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
	cl, err := cf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *wait+cf.timeout)
	lk, err := cl.Lock(ctx, key, *lease, *wait)
	cancel()
	if err != nil {
		return clientErr(err)
	}
	// The command's output and exec's own messages share the writers.
	stdout, stderr = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	cmd := exec.Command(path, rest[1:]...)
	cmd.Args[0] = rest[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), fmt.Sprintf("RAFTLOCK_TOKEN=%d", lk.Token()), "RAFTLOCK_KEY="+key)
	// Its own process group, so that stopping the command stops everything
	// it started: nothing may keep using the resource once the lock is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	signalGroup := func(sig syscall.Signal) { syscall.Kill(-cmd.Process.Pid, sig) }
	if err := cmd.Start(); err != nil {
		lk.Unlock(context.Background())
		return fmt.Errorf("start %s: %w", rest[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var lostErr error
	var waitErr error
wait:
	for {
		select {
		case waitErr = <-exited:
			break wait
		case s := <-sigs:
			signalGroup(s.(syscall.Signal))
		case <-lk.Lost():
			lostErr = lk.Err()
			fmt.Fprintf(stderr, "raftlock exec: lost the lock on %s (%v); stopping %s\n", key, lostErr, rest[0])
			signalGroup(syscall.SIGTERM)
			select {
			case waitErr = <-exited:
			case <-time.After(5 * time.Second):
				signalGroup(syscall.SIGKILL)
				waitErr = <-exited
			}
			break wait
		}
	}
	rctx, rcancel := context.WithTimeout(context.Background(), cf.timeout)
	defer rcancel()
	if lostErr != nil {
		return withCode(exitError, fmt.Errorf("lost the lock on %s while %s ran", key, rest[0]))
	}
	if err := lk.Unlock(rctx); err != nil {
		fmt.Fprintf(stderr, "raftlock exec: release %s: %v\n", key, err)
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal()) // as a shell reports a death by signal
		} else if code < 0 {
			code = exitError
		}
		return withCode(code, errors.New(""))
	}
	if waitErr != nil {
		return waitErr
	}
	return nil
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

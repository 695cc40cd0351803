package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/lockexec"
)

// execSynopsis is exec's usage line, also the answer to a command given
// without "--" before it.
const execSynopsis = "raftlock exec KEY [flags] -- COMMAND [ARGS...]"

func runExec(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("exec", "exec KEY [--lease 10s] [--wait 30s] [--kill-after 5s] [--owner TEXT] -- COMMAND [ARGS...]\n\n"+
		"Runs COMMAND holding the lock, with RAFTLOCK_TOKEN (its fencing token) and RAFTLOCK_LOCK_KEY\n"+
		"in its environment, renewing the lease every third of it. Exits with COMMAND's status\n"+
		"(128+n when signal n ended it; 127 not found, 126 not runnable), 1 when the lock was lost,\n"+
		"3 when --wait ran out, 128+n when signal n came while waiting (nothing ran).", false)
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
	// The signals a terminal or a supervisor sends are caught from here
	// on: while exec waits for the lock they give the wait up; once the
	// command runs they are passed on to it, never left to end exec, which
	// ends only after the command's whole group has. Notify also catches a
	// SIGINT exec was started with ignored (a script's &).
	sigs, stop := notify(relaySignals()...)
	defer stop()
	cl, err := cf.clientAs(*owner)
	if err != nil {
		return err
	}
	defer cl.Close()
	lk, err := lockOrSignal(cl, cf, key, *lease, *wait, sigs)
	if err != nil {
		return err
	}
	return runLocked(lk, key, path, rest, *killAfter, sigs, cf.timeout, stdout, stderr)
}

// lockOrSignal takes the lock on key, waiting up to wait, unless a signal
// comes first.
func lockOrSignal(cl *client.Client, cf *clientFlags, key string, lease, wait time.Duration, sigs <-chan os.Signal) (*client.Locker, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait+cf.timeout)
	defer cancel()
	lk, err := untilSignal(ctx, sigs, func(ctx context.Context) (*client.Locker, error) {
		return cl.Lock(ctx, key, lease, wait)
	}, func(lk *client.Locker) {
		uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ucancel()
		lk.Unlock(uctx)
	})
	var se signalError
	if errors.As(err, &se) {
		return nil, withCode(128+int(se.sig), fmt.Errorf("%v while waiting for the lock on %s: nothing ran", se.sig, key))
	}
	if err != nil {
		return nil, clientErr(cf.timedOut(err))
	}
	return lk, nil
}

// runLocked runs the command holding lk (lockexec.Run) and releases the
// lock once nothing of the command runs.
func runLocked(lk *client.Locker, key, path string, argv []string, killAfter time.Duration, sigs <-chan os.Signal, timeout time.Duration, stdout, stderr io.Writer) error {
	out, err := lockexec.Run(lk, key, lockexec.Command{
		Name: argv[0], Path: path, Args: argv[1:],
		// RAFTLOCK_LOCK_KEY, not RAFTLOCK_KEY: that one is --key (the TLS
		// private key) of every raftlock command the job itself runs.
		Env:   append(os.Environ(), fmt.Sprintf("RAFTLOCK_TOKEN=%d", lk.Token()), "RAFTLOCK_LOCK_KEY="+key),
		Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, KillAfter: killAfter, Signals: sigs,
	})
	if err != nil {
		if !out.Started {
			lk.Unlock(context.Background()) // nothing ran
		}
		return withCode(exitError, err)
	}
	if out.Lost != nil {
		return withCode(exitError, fmt.Errorf("lost the lock on %s while %s ran", key, argv[0]))
	}
	rctx, rcancel := context.WithTimeout(context.Background(), timeout)
	defer rcancel()
	if err := lk.Unlock(rctx); err != nil {
		fmt.Fprintf(stderr, "raftlock exec: release %s: %v\n", key, err)
	}
	return commandStatus(out.Exit)
}

// commandStatus is exec's exit for the command's end: its exit status, or
// 128+n for a death by signal n, as a shell reports it.
func commandStatus(exit error) error {
	code, ok := lockexec.ExitCode(exit)
	if !ok {
		return exit
	}
	if code < 0 {
		code = exitError
	}
	return withCode(code, errors.New(""))
}

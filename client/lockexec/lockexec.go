// Package lockexec runs a command while a lock is held, as `raftlock exec`
// does: the command in a process group of its own, its output copied out,
// signals passed on to the group, and the group stopped (SIGTERM, then
// SIGKILL) when the command ends or the lock is lost, so that nothing it
// started outlives the hold.
package lockexec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/syncio"
)

const (
	// groupPoll is how often the group is looked at for being empty.
	groupPoll = 20 * time.Millisecond
	// OutputDrain bounds the wait for the command's output once its
	// group is gone: only a process that left the group can still hold
	// the pipe.
	OutputDrain = 2 * time.Second
)

// Command is what to run under the lock.
type Command struct {
	Name string   // as the user typed it: argv[0] and the name in messages
	Path string   // the executable (exec.LookPath of Name)
	Args []string // after argv[0]
	Env  []string
	// Stdin is the command's; Stdout and Stderr receive its output, and
	// Stderr the supervisor's messages too, through one lock each.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// KillAfter is how long the group has between SIGTERM and SIGKILL.
	KillAfter time.Duration
	// Signals are passed on to the group while the command runs; one
	// coming while the group is being stopped kills it at once.
	Signals <-chan os.Signal
}

// Outcome is how a run under the lock ended.
type Outcome struct {
	// Started says whether the command ran: a run that fails before it
	// leaves the lock to the caller to release.
	Started bool
	// Exit is the command's own end, as exec.Cmd.Wait returns it.
	Exit error
	// Lost is the lock's loss while the command or its group ran; nil
	// when the lock was held throughout.
	Lost error
}

// Run starts c holding lk (key names the lock in messages) and returns
// once nothing of its process group runs. It fails, with the lock left to
// expire, when the command cannot start (Outcome.Started is false: the
// lock is the caller's to release) or when processes survive SIGKILL (the
// lock is left to expire).
func Run(lk *client.Locker, key string, c Command) (Outcome, error) {
	stdout, stderr := &syncio.Writer{W: c.Stdout}, &syncio.Writer{W: c.Stderr}
	outs, err := newOutputCopies(stdout, stderr)
	if err != nil {
		return Outcome{}, err
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Args[0] = c.Name
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, outs[0].w, outs[1].w
	cmd.Env = c.Env
	// Its own process group, so that stopping the command stops everything
	// it started: nothing may keep using the resource once the lock is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		outs.close()
		return Outcome{}, fmt.Errorf("start %s: %w", c.Name, err)
	}
	outs.started()
	r := &run{c: c, key: key, lk: lk, cmd: cmd, stderr: stderr, exited: make(chan error, 1)}
	go func() { r.exited <- cmd.Wait() }()
	out, err := r.supervise()
	if err != nil {
		return out, err
	}
	outs.finish(OutputDrain)
	return out, nil
}

// run is one command's supervision.
type run struct {
	c      Command
	key    string
	lk     *client.Locker
	cmd    *exec.Cmd
	stderr io.Writer
	exited chan error
}

// supervise waits for the command's end or the lock's loss, then stops
// what is left of the group.
func (r *run) supervise() (Outcome, error) {
	out := Outcome{Started: true}
	pgid := r.cmd.Process.Pid
	mainDone := false
wait:
	for {
		select {
		case out.Exit = <-r.exited:
			mainDone = true
			break wait
		case s := <-r.c.Signals:
			syscall.Kill(-pgid, s.(syscall.Signal))
		case <-r.lk.Lost():
			out.Lost = r.lk.Err()
			fmt.Fprintf(r.stderr, "raftlock exec: lost the lock on %s (%v); stopping %s\n", r.key, out.Lost, r.c.Name)
			break wait
		}
	}
	// Whatever ended the wait, nothing of the command may outlive the
	// hold: a background child of a shell that exited (or was
	// interrupted) still uses the resource the lock guards.
	g := processGroup{pgid: pgid, killAfter: r.c.KillAfter, sigs: r.c.Signals, stderr: r.stderr}
	if mainDone {
		g.lost = r.lk.Lost()
		g.note = fmt.Sprintf("%s exited", r.c.Name)
	}
	if err := g.stop(); err != nil {
		// Not released: the lease runs out on its own once exec stops
		// renewing, and by then SIGKILL has had its time.
		return out, fmt.Errorf("%w; the lock on %s is left to expire", err, r.key)
	}
	if !mainDone {
		// The group is empty, so the command is gone, unless it moved to
		// another group: it must not outlive the hold either.
		select {
		case out.Exit = <-r.exited:
		default:
			r.cmd.Process.Kill() // a no-op on a command that has just exited
			out.Exit = <-r.exited
		}
	}
	if out.Lost == nil {
		select {
		case <-r.lk.Lost():
			out.Lost = r.lk.Err() // lost while the group was being stopped
		default:
		}
	}
	return out, nil
}

// ExitCode is a shell's status for the command's end: its exit status,
// or 128+n for a death by signal n; ok is false when exit is not an exit
// status (nil, or a failure to wait).
func ExitCode(exit error) (code int, ok bool) {
	var ee *exec.ExitError
	if !errors.As(exit, &ee) {
		return 0, false
	}
	code = ee.ExitCode()
	if ws, wok := ee.Sys().(syscall.WaitStatus); wok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return code, true
}

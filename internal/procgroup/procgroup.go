// Package procgroup starts and stops the server processes the benchmark
// and the chaos harness run beside raftlock (etcd, Redis, raftlock
// members): each with its log appended to a file, dying with the harness
// where the system allows it, restartable with the same command line, and
// a readiness poll for what they serve.
package procgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/internal/procattr"
)

// Group is a set of server processes.
type Group struct {
	Env   []string // added to each process's environment
	procs []*Proc
}

// Proc is one server process, with what it takes to start it again.
type Proc struct {
	bin     string
	args    []string
	logPath string

	mu     sync.Mutex // guards cmd and exited: a restart replaces them
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
}

// current is p's process and its exit, nil before it started.
func (p *Proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.exited
}

// Start starts a process, its output appended to logPath, and adds it to
// the group.
func (g *Group) Start(bin string, args []string, logPath string) (*Proc, error) {
	p := &Proc{bin: bin, args: args, logPath: logPath}
	if err := g.launch(p); err != nil {
		return nil, err
	}
	g.procs = append(g.procs, p)
	return p, nil
}

// launch starts p's process, its log appended to (a restarted member's
// log keeps what it said before it was killed).
func (g *Group) launch(p *Proc) error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), g.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procattr.Child()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.bin, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited = cmd, done
	p.mu.Unlock()
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// Running reports whether p's process has not exited.
func (p *Proc) Running() bool {
	cmd, exited := p.current()
	if cmd == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Exited is closed once p's current process has exited.
func (p *Proc) Exited() <-chan struct{} {
	_, exited := p.current()
	return exited
}

// Kill ends p's process with SIGKILL, as a crash would, and waits for it.
func (p *Proc) Kill() {
	cmd, exited := p.current()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Signal sends sig to p's process if it runs (SIGSTOP, SIGCONT).
func (p *Proc) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return fmt.Errorf("signal %s: not running", p.logPath)
	}
	cmd, _ := p.current()
	return cmd.Process.Signal(sig)
}

// Restart starts p's process again with the same command line.
func (g *Group) Restart(p *Proc) error {
	if p.Running() {
		return fmt.Errorf("restart %s: still running", p.logPath)
	}
	return g.launch(p)
}

// Remove stops p (SIGTERM, then SIGKILL after grace) and drops it from
// the group, so CPU accounting no longer counts it.
func (g *Group) Remove(p *Proc, grace time.Duration) {
	p.Terminate(grace)
	g.procs = slices.DeleteFunc(g.procs, func(q *Proc) bool { return q == p })
}

// Terminate sends SIGTERM and kills the process if it outlives grace. A
// stopped process is continued first, so it can take the signal.
func (p *Proc) Terminate(grace time.Duration) {
	if !p.Running() {
		return
	}
	cmd, exited := p.current()
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-exited:
	case <-time.After(grace):
		p.Kill()
	}
}

// PID is p's process id (0 before it started).
func (p *Proc) PID() int {
	cmd, _ := p.current()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// PIDs are the running processes: one killed is not counted until it
// runs again.
func (g *Group) PIDs() []int {
	var out []int
	for _, p := range g.procs {
		if p.Running() {
			out = append(out, p.PID())
		}
	}
	return out
}

// Stop ends every process: SIGTERM to all, then each is killed if it
// outlives 5 s.
func (g *Group) Stop() {
	for _, p := range g.procs {
		if p.Running() {
			p.Signal(syscall.SIGTERM)
			p.Signal(syscall.SIGCONT)
		}
	}
	for _, p := range g.procs {
		p.Terminate(5 * time.Second)
	}
}

// WaitUntil polls ready (each try bounded by a second) until it succeeds
// or ctx ends; what names the server in the error.
func WaitUntil(ctx context.Context, what string, ready func(context.Context) error) error {
	var err error
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err = ready(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", what, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LogPath is the file p's output is appended to.
func (p *Proc) LogPath() string { return p.logPath }

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/procattr"
)

// procGroup is a set of server processes the bench started.
type procGroup struct {
	procs []*proc
	env   []string // added to each process's environment
}

// proc is one server process, with what it takes to start it again.
type proc struct {
	bin     string
	args    []string
	logPath string
	cmd     *exec.Cmd
	log     *os.File
	exited  chan struct{} // closed once the process has been waited for
}

// shareCores gives each of n Go server processes its share of this
// machine's cores, as if each ran on a machine of its own: without it three
// replicas on two cores spend their time in each other's idle spinning
// (measured: 1-client p50 2.3 ms with GOMAXPROCS=2 per member, 1.7 ms with 1).
func shareCores(n int) []string {
	return []string{fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/max(n, 1)))}
}

// start starts a process and adds it to the group.
func (g *procGroup) start(bin string, args []string, logPath string) error {
	_, err := g.add(bin, args, logPath)
	return err
}

// add is start, returning the process for the bench's own control of it.
func (g *procGroup) add(bin string, args []string, logPath string) (*proc, error) {
	p := &proc{bin: bin, args: args, logPath: logPath}
	if err := g.launch(p); err != nil {
		return nil, err
	}
	g.procs = append(g.procs, p)
	return p, nil
}

// launch starts p's process, its log appended to (a restarted member's
// log keeps what it said before it was killed).
func (g *procGroup) launch(p *proc) error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), g.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procattr.DieWithParent()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.bin, err)
	}
	p.cmd, p.log, p.exited = cmd, logf, make(chan struct{})
	go func(done chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(done)
	}(p.exited)
	return nil
}

// running reports whether p's process has not exited.
func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill ends p's process with SIGKILL, as a crash would, and waits for it.
func (p *proc) kill() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// restart starts p's process again with the same command line.
func (g *procGroup) restart(p *proc) error {
	if p.running() {
		return fmt.Errorf("restart %s: still running", p.logPath)
	}
	return g.launch(p)
}

// remove stops p (SIGTERM, then SIGKILL after grace) and drops it from
// the group, so CPU accounting no longer counts it.
func (g *procGroup) remove(p *proc, grace time.Duration) {
	p.terminate(grace)
	g.procs = slices.DeleteFunc(g.procs, func(q *proc) bool { return q == p })
}

// terminate sends SIGTERM and kills the process if it outlives grace.
func (p *proc) terminate(grace time.Duration) {
	if !p.running() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.kill()
	}
}

// pid is p's process id (0 before it started).
func (p *proc) pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// pids are the running processes: a member the bench killed is not
// counted until it runs again.
func (g *procGroup) pids() []int {
	var out []int
	for _, p := range g.procs {
		if p.running() {
			out = append(out, p.pid())
		}
	}
	return out
}

func (g *procGroup) stop() {
	for _, p := range g.procs {
		if p.running() {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range g.procs {
		p.terminate(5 * time.Second)
	}
}

func freePort() (int, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return 0, err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// waitUntil polls ready until it succeeds or ctx ends.
func waitUntil(ctx context.Context, what string, ready func(context.Context) error) error {
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

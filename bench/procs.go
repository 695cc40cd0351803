package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
)

// procGroup is a set of server processes the bench started.
type procGroup struct {
	cmds []*exec.Cmd
	logs []*os.File
	env  []string // added to each process's environment
}

// shareCores gives each of n Go server processes its share of this
// machine's cores, as if each ran on a machine of its own: without it three
// replicas on two cores spend their time in each other's idle spinning
// (measured: 1-client p50 2.3 ms with GOMAXPROCS=2 per member, 1.7 ms with 1).
func shareCores(n int) []string {
	return []string{fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/max(n, 1)))}
}

func (g *procGroup) start(bin string, args []string, logPath string) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), g.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	g.cmds = append(g.cmds, cmd)
	g.logs = append(g.logs, logf)
	return nil
}

func (g *procGroup) pids() []int {
	var out []int
	for _, c := range g.cmds {
		out = append(out, c.Process.Pid)
	}
	return out
}

func (g *procGroup) stop() {
	for _, c := range g.cmds {
		c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range g.cmds {
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.Process.Kill()
			<-done
		}
	}
	for _, f := range g.logs {
		f.Close()
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

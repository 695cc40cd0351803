package main

// The helpers of the tests that run clusters of `raftlock node` processes
// (processCluster); binary_test.go runs the binary itself.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/promtext"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/nodetest"
)

// processMember is one `raftlock node` child process and its addresses.
type processMember struct {
	id                     int
	peer, client, httpAddr string
	cmd                    *exec.Cmd
	exited                 chan struct{}
	// join, when set, starts the member with --join (these client
	// endpoints) instead of --peers.
	join string
}

// processCluster runs real `raftlock node` processes, for the tests that
// need what only a process gives: SIGKILL at any moment, and a restart that
// must read everything back from disk.
type processCluster struct {
	t       *testing.T
	bin     string
	dir     string
	extra   []string
	members []*processMember
	// listenArgs, if set, gives a member's --listen and --peer-listen
	// flags (default: listen where the others dial it).
	listenArgs func(m *processMember) []string
	// wrap, if set, gives the program and arguments that run a member
	// whose command line is bin argv (under a shell's ulimit, say).
	wrap func(m *processMember, bin string, argv []string) (string, []string)
}

func newProcessCluster(t *testing.T, size int, extra ...string) *processCluster {
	t.Helper()
	return newProcessClusterWith(t, size, nil, extra...)
}

func newProcessClusterWith(t *testing.T, size int, listenArgs func(*processMember) []string, extra ...string) *processCluster {
	t.Helper()
	c := &processCluster{t: t, bin: buildBinary(t), dir: t.TempDir(), extra: extra, listenArgs: listenArgs}
	for id := 1; id <= size; id++ {
		c.members = append(c.members, newMember(t, id))
	}
	for _, m := range c.members {
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			c.kill(m)
		}
	})
	return c
}

func (c *processCluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	return eps
}

func (c *processCluster) start(m *processMember) {
	c.t.Helper()
	a := embed.Args{ID: uint64(m.id), Listen: m.client, HTTP: m.httpAddr, Data: c.dataDir(m.id), Extra: c.extra}
	if c.listenArgs != nil {
		a.Listen, a.Extra = "", append(c.listenArgs(m), c.extra...)
	}
	if m.join != "" {
		a.Join, a.PeerListen = []string{m.join}, m.peer
	} else {
		a.Peers = map[uint64]string{}
		for _, p := range c.members {
			if p.join == "" { // one joined later is not in the bootstrap configuration
				a.Peers[uint64(p.id)] = p.peer
			}
		}
	}
	bin, argv := c.bin, a.Argv()
	if c.wrap != nil {
		bin, argv = c.wrap(m, bin, argv)
	}
	m.cmd, m.exited = spawn(c.t, bin, filepath.Join(c.dir, fmt.Sprintf("node-%d.log", m.id)), argv)
}

// dataDir is member id's data directory (that member may not be started
// yet, or not be a member at all).
func (c *processCluster) dataDir(id int) string {
	return filepath.Join(c.dir, fmt.Sprintf("data-%d", id))
}

func (c *processCluster) kill(m *processMember) {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
	m.cmd = nil
}

// running reports whether m's process is still alive (a member that panics
// on start exits at once).
func (m *processMember) running() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

func (c *processCluster) log(m *processMember) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("node-%d.log", m.id)))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// fullLog is all of m's log, where log is its tail.
func (c *processCluster) fullLog(m *processMember) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("node-%d.log", m.id)))
	return string(b)
}

// readyProcessCluster starts three members (info logs) and returns them
// with a client that has seen a leader (a read succeeded) and a context
// that bounds the test to d; both end with the test.
func readyProcessCluster(t *testing.T, d time.Duration) (*processCluster, context.Context, *client.Client) {
	t.Helper()
	return readyProcessClusterWith(t, d, "--log-level", "info")
}

// readyProcessClusterWith is readyProcessCluster with the members' flags
// given.
func readyProcessClusterWith(t *testing.T, d time.Duration, extra ...string) (*processCluster, context.Context, *client.Client) {
	t.Helper()
	c := newProcessCluster(t, 3, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	cl := nodetest.Client(t, c.endpoints()...)
	waitUntil(ctx, t, "a leader", func() bool {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		defer acancel()
		_, err := cl.Get(actx, "warm-up")
		return err == nil
	})
	return c, ctx, cl
}

// freePort is one free loopback port, as a flag value.
func freePort(t *testing.T) string {
	t.Helper()
	_, port, _ := strings.Cut(freeport.For(t), ":")
	return port
}

// holdLocks acquires each key with a one-hour lease, each tried until it
// is granted (a leader may still change hands), and returns the tokens.
func holdLocks(ctx context.Context, t *testing.T, cl *client.Client, keys ...string) map[string]uint64 {
	t.Helper()
	held := map[string]uint64{}
	for _, key := range keys {
		waitUntil(ctx, t, "the lock on "+key, func() bool {
			actx, acancel := context.WithTimeout(ctx, time.Second)
			defer acancel()
			g, err := cl.Acquire(actx, key, time.Hour, 0)
			held[key] = g.Token
			return err == nil
		})
	}
	return held
}

// logs is the log tail of every member, named with its client address,
// for a failure that cannot say which member caused it.
func (c *processCluster) logs() string {
	var b strings.Builder
	for _, m := range c.members {
		fmt.Fprintf(&b, "--- member %d (client %s, peer %s):\n%s\n", m.id, m.client, m.peer, c.log(m))
	}
	return b.String()
}

// metric reads one unlabelled sample from m's /metrics.
func (m *processMember) metric(ctx context.Context, name string) (float64, error) {
	all, err := promtext.Fetch(ctx, "http://"+m.httpAddr+"/metrics")
	if err != nil {
		return 0, err
	}
	v, ok := all[name]
	if !ok {
		return 0, fmt.Errorf("no metric %s", name)
	}
	return v, nil
}

// waitUntil polls cond every 20 ms until it holds or ctx ends.
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// run runs the CLI binary with args and returns its exit code and its
// output, stdout then stderr.
func (c *processCluster) run(args ...string) (int, string) {
	c.t.Helper()
	r := runCLI(c.t, c.bin, nil, args...)
	return r.code, r.stdout + r.stderr
}

// stop sends m SIGTERM and waits for it to exit; it must exit 0.
func (c *processCluster) stop(m *processMember) {
	c.t.Helper()
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(15 * time.Second):
		c.t.Fatalf("member %d did not stop within 15s of SIGTERM:\n%s", m.id, c.log(m))
	}
	if code := m.cmd.ProcessState.ExitCode(); code != 0 {
		c.t.Fatalf("member %d exited %d after SIGTERM:\n%s", m.id, code, c.log(m))
	}
	m.cmd = nil
}

// hangUp sends m SIGHUP and waits until it logs what once more than
// before: the reload it asked for, not an earlier one.
func (c *processCluster) hangUp(m *processMember, what string) {
	c.t.Helper()
	before := strings.Count(c.fullLog(m), what)
	m.cmd.Process.Signal(syscall.SIGHUP)
	nodetest.WaitFor(c.t, 10*time.Second, fmt.Sprintf("member %d to log %q after SIGHUP", m.id, what), func() bool {
		return strings.Count(c.fullLog(m), what) > before
	})
}

// addJoiner adds member id (fresh addresses) to the cluster through eps
// with member add, to join with --join eps; it is not started.
func (c *processCluster) addJoiner(id int, eps string) *processMember {
	c.t.Helper()
	m := newMember(c.t, id)
	m.join = eps
	if code, out := c.run("member", "add", "--endpoints", eps, "--id", strconv.Itoa(id), "--peer-addr", m.peer, "--client-addr", m.client); code != 0 {
		c.t.Fatalf("member add: exit %d\n%s", code, out)
	}
	return m
}

// newMember allocates the addresses of a member to be added.
func newMember(t *testing.T, id int) *processMember {
	t.Helper()
	return &processMember{id: id, peer: freeport.For(t), client: freeport.For(t), httpAddr: freeport.For(t)}
}

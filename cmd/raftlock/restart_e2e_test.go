package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/promtext"
	"github.com/raftlock/raftlock/internal/testbin"
	"github.com/raftlock/raftlock/node/embed"
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
}

func buildBinary(t *testing.T) string { return testbin.Build(t, ".") }

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
	a := embed.Args{ID: uint64(m.id), Listen: m.client, HTTP: m.httpAddr, Data: filepath.Join(c.dir, fmt.Sprintf("data-%d", m.id)), Extra: c.extra}
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
	logf, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("node-%d.log", m.id)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	m.cmd = exec.Command(c.bin, a.Argv()...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		c.t.Fatalf("start member %d: %v", m.id, err)
	}
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(done)
	}(m.cmd, m.exited)
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
	cl, err := client.New(c.endpoints(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	waitUntil(ctx, t, "a leader", func() bool {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		defer acancel()
		_, err := cl.Get(actx, "warm-up")
		return err == nil
	})
	return c, ctx, cl
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

// Issue 8's end-to-end proof: real member processes that snapshot every 50
// entries, under load from `raftlock bench --endpoints`, are each killed
// with SIGKILL and restarted in turn, three rounds over. Every member must
// come back (a member that snapshotted used to panic on every start), the
// cluster must converge on one digest, and locks taken with a one-hour lease
// before the kills must still be held with their tokens.
func TestEveryMemberSurvivesKill9WithSnapshotsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c, ctx, cl := readyProcessClusterWith(t, 4*time.Minute, "--snapshot-every", "50", "--snapshot-keep", "20", "--log-level", "warn")
	held := holdLocks(ctx, t, cl, "held-0", "held-1", "held-2")

	// Load for the whole test, through every kill and restart (it sees
	// errors while members restart; it only has to keep the log moving).
	var loadOut syncBuffer
	load := exec.CommandContext(ctx, c.bin, "bench", "--endpoints", strings.Join(c.endpoints(), ","),
		"--clients", "8", "--workload", "uncontended", "--warmup", "0s", "--duration", "10m", "--lease", "2s",
		"--out", filepath.Join(c.dir, "bench"))
	load.Stdout, load.Stderr = &loadOut, &loadOut
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	loadDone := make(chan struct{})
	go func() {
		load.Wait()
		close(loadDone)
	}()
	defer func() {
		load.Process.Signal(syscall.SIGINT)
		<-loadDone
	}()
	for round := 1; round <= 3; round++ {
		for _, m := range c.members {
			before, _ := m.metric(ctx, "raftlock_snapshots_total")
			waitUntil(ctx, t, fmt.Sprintf("member %d to take a snapshot under load (round %d)", m.id, round), func() bool {
				select {
				case <-loadDone:
					t.Fatalf("the bench load stopped:\n%s", loadOut.String())
				default:
				}
				v, err := m.metric(ctx, "raftlock_snapshots_total")
				return err == nil && v > before
			})
			c.kill(m)
			c.start(m)
			waitUntil(ctx, t, fmt.Sprintf("member %d to serve again after restart (round %d)", m.id, round), func() bool {
				if !m.running() {
					t.Fatalf("member %d exited after its restart in round %d:\n%s", m.id, round, c.log(m))
				}
				_, err := m.metric(ctx, "raftlock_applied_index")
				return err == nil
			})
		}
	}

	// All members up, one leader, one applied index and one digest.
	waitUntil(ctx, t, "one leader and equal digests at equal applied indexes", func() bool {
		leaders := 0
		var applied uint64
		var digest string
		for i, m := range c.members {
			if !m.running() {
				t.Fatalf("member %d is not running:\n%s", m.id, c.log(m))
			}
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Status(sctx, m.client)
			scancel()
			if err != nil {
				return false
			}
			if st.Role == "leader" {
				leaders++
			}
			if i == 0 {
				applied, digest = st.Applied, st.Digest
			} else if st.Applied != applied || st.Digest != digest {
				return false
			}
		}
		return leaders == 1
	})
	for key, token := range held {
		info, err := cl.Get(ctx, key)
		if err != nil || !info.Held || info.Token != token {
			t.Fatalf("%s after three rounds of kills: %+v, %v; want held with token %d", key, info, err, token)
		}
	}
	var installs float64
	for _, m := range c.members {
		v, _ := m.metric(ctx, "raftlock_snapshots_installed_total")
		installs += v
	}
	t.Logf("snapshots installed by the final incarnations: %v", installs)
}

// A second member started on a data directory in use says so plainly.
func TestSecondMemberOnSameDataDirectoryRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := newProcessCluster(t, 1, "--log-level", "warn")
	m := c.members[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitUntil(ctx, t, "the member to serve", func() bool {
		_, err := m.metric(ctx, "raftlock_applied_index")
		return err == nil
	})
	other, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, c.bin, "node", "--id", "1", "--peers", "1="+m.peer, "--listen", other,
		"--data", filepath.Join(c.dir, "data-1")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another process") {
		t.Fatalf("second member on the same data directory: %v\n%s", err, out)
	}
}

// Members listening on every interface give out the addresses they
// advertise: redirects and status name --advertise-client, and peers dial
// the --peers address while the member listens on --peer-listen.
func TestMembersListeningOnAllInterfacesAdvertiseReachableAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	port := func(addr string) string { _, p, _ := strings.Cut(addr, ":"); return p }
	c := newProcessClusterWith(t, 3, func(m *processMember) []string {
		return []string{"--listen", "0.0.0.0:" + port(m.client), "--advertise-client", m.client,
			"--peer-listen", "0.0.0.0:" + port(m.peer)}
	}, "--log-level", "warn", "--insecure") // all interfaces without certificates: --insecure says so
	cl, err := client.New(c.endpoints(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitUntil(ctx, t, "a leader that follower redirects name by its advertised address", func() bool {
		for _, m := range c.members {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Status(sctx, m.client)
			scancel()
			if err != nil || st.Addr != m.client {
				return false
			}
			if st.Role == "follower" && st.LeaderAddr != "" {
				for _, l := range c.members {
					if l.id == int(st.Leader) && st.LeaderAddr != l.client {
						t.Fatalf("member %d names leader %d at %s, want its advertised %s", m.id, l.id, st.LeaderAddr, l.client)
					}
				}
				return true
			}
		}
		return false
	})
	if _, err := cl.Acquire(ctx, "k", time.Minute, 0); err != nil {
		t.Fatalf("acquire through redirects: %v", err)
	}
}

// Package nodetest runs a raftlock cluster inside one process, over real
// loopback TCP and real pebble directories, for tests and smoke benchmarks.
// It is the one in-process cluster helper of the node, client and bench
// tests (real-process clusters live with the CLI tests and the chaos
// harness).
//
// Each member has a client server on its own port, a data directory that
// outlives a stop (a restarted member recovers from it) and a
// clock.Skew the test may skew. A cluster made by New belongs to a test:
// it is closed when the test ends, and its waiting helpers (WaitLeader,
// Converged, Restart) fail the test instead of returning errors. Start is
// the same without a testing.TB.
package nodetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/freeport"
	membercore "github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/clock"
	"github.com/raftlock/raftlock/node/server"
)

// Cluster is a set of in-process members with client servers.
type Cluster struct {
	Dir     string            // members' data directories are Dir/<id>
	Peers   map[uint64]string // raft peer addresses
	Clients map[uint64]string // client API addresses
	tune    func(*node.Config)
	clocks  map[uint64]*clock.Skew
	t       testing.TB // nil for a cluster made by Start

	mu      sync.Mutex
	members map[uint64]*member
	apis    map[uint64]*apiPort // NewWithAPI's, until KillMember
}

type member struct {
	node   *node.Node
	server *server.Server
	relay  *client.Relay
}

// RareElections is a tune for New that makes elections rare (an election
// timeout of 50 ticks, 500 ms): on a loaded machine a member starved past
// the default timeout starts one, and a leader change under a call rightly
// answers it outcome-unknown, which a test that checks each call's answer
// cannot tell from a wrong answer.
func RareElections(cfg *node.Config) { cfg.ElectionTicks = 50 }

// New runs size members in a temporary directory of t and closes them when
// t ends. tune, if not nil, adjusts each member's config every time the
// member starts; it may call t.Fatal. It fails t if a member cannot start.
func New(t testing.TB, size int, tune func(*node.Config)) *Cluster {
	t.Helper()
	dir := t.TempDir()
	var c *Cluster
	// Registered before any member starts, so that members started before
	// a failure (or a t.Fatal in tune) are closed too.
	t.Cleanup(func() {
		if c != nil {
			c.Close()
		}
	})
	for attempt := 1; ; attempt++ {
		var err error
		if c, err = newCluster(dir, size, tune); err != nil {
			t.Fatal(err)
		}
		c.t = t
		err = c.startEach()
		if err == nil {
			return c
		}
		if !c.retryStart(attempt, err) {
			t.Fatal(err)
		}
	}
}

// Start runs size members in dir. tune, if not nil, adjusts each config.
// The caller closes the cluster.
func Start(dir string, size int, tune func(*node.Config)) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := newCluster(dir, size, tune)
		if err != nil {
			return nil, err
		}
		if err = c.startEach(); err == nil {
			return c, nil
		}
		if !c.retryStart(attempt, err) {
			return nil, err
		}
	}
}

// startEach starts every member, in id order.
func (c *Cluster) startEach() error {
	for _, id := range c.IDs() {
		if err := c.StartMember(id); err != nil {
			return err
		}
	}
	return nil
}

// retryStart closes a cluster whose start failed and says whether to
// start again: an address is free only when it is picked, and another
// process may bind it before the member does ("address already in use").
// Then the data the members wrote (their identity names the old peer
// addresses) goes, and the next attempt picks new addresses.
func (c *Cluster) retryStart(attempt int, err error) bool {
	c.Close()
	if attempt >= 4 || !errors.Is(err, syscall.EADDRINUSE) {
		return false
	}
	for _, id := range c.IDs() {
		os.RemoveAll(c.DataDir(id))
	}
	return true
}

// newCluster picks the addresses and makes the clocks; no member runs yet.
func newCluster(dir string, size int, tune func(*node.Config)) (*Cluster, error) {
	c := &Cluster{Dir: dir, Peers: map[uint64]string{}, Clients: map[uint64]string{},
		clocks: map[uint64]*clock.Skew{}, members: map[uint64]*member{}, tune: tune}
	for id := uint64(1); id <= uint64(size); id++ {
		var err error
		if c.Peers[id], err = freeport.Addr(); err != nil {
			return nil, err
		}
		if c.Clients[id], err = freeport.Addr(); err != nil {
			return nil, err
		}
		c.clocks[id] = clock.NewSkew()
	}
	return c, nil
}

// IDs lists every member id, running or not, in order.
func (c *Cluster) IDs() []uint64 {
	ids := make([]uint64, 0, len(c.Peers))
	for id := range c.Peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// DataDir is member id's data directory; it outlives a stop.
func (c *Cluster) DataDir(id uint64) string {
	return filepath.Join(c.Dir, strconv.FormatUint(id, 10))
}

// Clock is member id's clock; it is kept across restarts.
func (c *Cluster) Clock(id uint64) *clock.Skew { return c.clocks[id] }

// StartMember (re)starts member id from its data directory.
func (c *Cluster) StartMember(id uint64) error {
	level := slog.LevelWarn
	if os.Getenv("RAFTLOCK_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	cfg := node.Config{
		Config:     membercore.Config{ID: id, Peers: c.Peers, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))},
		ClientAddr: c.Clients[id],
		DataDir:    c.DataDir(id),
		Clock:      c.clocks[id],
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("member %d: %w", id, err)
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	ln, err := net.Listen("tcp", c.Clients[id])
	if err != nil {
		if cfg.Storage != nil {
			// The store tune opened is the member's: a retry opens it
			// again, which its directory lock refuses while this one is
			// open.
			cfg.Storage.Close()
		}
		return fmt.Errorf("member %d: %w", id, err)
	}
	n, err := node.New(cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("new member %d: %w", id, err)
	}
	if err := n.Start(); err != nil {
		ln.Close()
		n.Close()
		return fmt.Errorf("start member %d: %w", id, err)
	}
	m := &member{node: n, server: server.New(n), relay: client.NewRelay(client.Options{})}
	m.server.SetRelay(m.relay) // followers relay API calls, as embed's members do
	go m.server.Serve(ln)
	c.mu.Lock()
	c.members[id] = m
	c.mu.Unlock()
	return nil
}

// StopMember stops member id abruptly; its data directory stays. It does
// nothing to a stopped member.
func (c *Cluster) StopMember(id uint64) {
	c.mu.Lock()
	m := c.members[id]
	delete(c.members, id)
	c.mu.Unlock()
	if m != nil {
		m.server.Close()
		m.relay.Close()
		m.node.Close()
	}
}

// Restart stops member id if it runs and starts it again from its data
// directory, and returns it; it fails the test if the member cannot start.
// Only for a cluster made by New.
func (c *Cluster) Restart(id uint64) *node.Node {
	t := c.tb("Restart")
	t.Helper()
	c.StopMember(id)
	if err := c.StartMember(id); err != nil {
		t.Fatalf("restart: %v", err)
	}
	return c.Node(id)
}

// running is member id, nil when it is stopped.
func (c *Cluster) running(id uint64) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[id]
}

// Node returns member id, or nil when it is stopped.
func (c *Cluster) Node(id uint64) *node.Node {
	if m := c.running(id); m != nil {
		return m.node
	}
	return nil
}

// Server returns member id's client server, or nil when it is stopped.
func (c *Cluster) Server(id uint64) *server.Server {
	if m := c.running(id); m != nil {
		return m.server
	}
	return nil
}

// Nodes returns the running members in id order.
func (c *Cluster) Nodes() []*node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := make([]*node.Node, 0, len(c.members))
	for _, m := range c.members {
		ns = append(ns, m.node)
	}
	slices.SortFunc(ns, func(a, b *node.Node) int { return cmp.Compare(a.ID(), b.ID()) })
	return ns
}

// Followers returns the running members other than leader, in id order:
// two calls return the same members in the same order.
func (c *Cluster) Followers(leader *node.Node) []*node.Node {
	var fs []*node.Node
	for _, n := range c.Nodes() {
		if n != leader {
			fs = append(fs, n)
		}
	}
	return fs
}

// Endpoints lists the client addresses in id order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, 0, len(c.Clients))
	for _, id := range c.IDs() {
		eps = append(eps, c.Clients[id])
	}
	return eps
}

// probeTimeout bounds one readiness probe, so that a member that believes
// it leads but cannot reach a quorum does not hold up the search.
const probeTimeout = 2 * time.Second

// Leader waits until some running member may make lock decisions (it leads
// and has passed its term barrier) and returns its id. The test is a
// linearizable read: the member answers it only when it may decide and a
// quorum confirms it still leads. The read changes no state.
func (c *Cluster) Leader(ctx context.Context) (uint64, error) {
	for {
		for _, n := range c.Nodes() {
			if st, err := n.Status(ctx); err != nil || st.Role != "leader" {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			_, err := n.Get(pctx, "probe", false)
			cancel()
			if err == nil {
				return n.ID(), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no ready leader: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// WaitLeader waits up to ten seconds for a member that may make lock
// decisions (see Leader) and returns it; it fails the test if none does.
// Only for a cluster made by New.
func (c *Cluster) WaitLeader() *node.Node {
	t := c.tb("WaitLeader")
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("timed out after 10s waiting for a ready leader: %v", err)
	}
	n := c.Node(id)
	if n == nil {
		t.Fatalf("ready leader %d stopped", id)
	}
	return n
}

// TransferLeader hands leadership to member to and waits until it leads and
// may make lock decisions (Leader). A transfer the node gives up on after
// two election timeouts (node.Node.TransferLeader), or an election that
// took leadership elsewhere meanwhile, is asked again: on a loaded machine
// either can outlast the node's patience. It fails the test after a
// minute. Only for a cluster made by New.
func (c *Cluster) TransferLeader(to uint64) {
	t := c.tb("TransferLeader")
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		id, err := c.Leader(ctx)
		if err != nil {
			t.Fatalf("transfer leadership to member %d: %v", to, err)
		}
		if id == to {
			return
		}
		if n := c.Node(id); n != nil {
			n.TransferLeader(ctx, to) // its error says only that it is not done yet
		}
	}
}

// Converged waits until every running member has applied one index and
// reports one digest there, and returns that digest; it fails the test
// after timeout. Only for a cluster made by New.
func (c *Cluster) Converged(timeout time.Duration) string {
	t := c.tb("Converged")
	t.Helper()
	var digest string
	WaitFor(t, timeout, "members to converge", func() bool {
		var applied uint64
		digest = ""
		for _, n := range c.Nodes() {
			st, err := n.Status(context.Background())
			if err != nil {
				return false
			}
			if digest == "" {
				applied, digest = st.Applied, st.Digest
			} else if st.Applied != applied || st.Digest != digest {
				return false
			}
		}
		return true
	})
	return digest
}

// tb is the test of a cluster made by New; the helpers that fail a test
// cannot serve a cluster made by Start.
func (c *Cluster) tb(method string) testing.TB {
	if c.t == nil {
		panic("nodetest: " + method + " needs a cluster made by New")
	}
	return c.t
}

// Close stops every member.
func (c *Cluster) Close() {
	c.mu.Lock()
	ids := make([]uint64, 0, len(c.members))
	for id := range c.members {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.StopMember(id)
	}
}

// Status is n's status; it fails t if n does not answer within ten
// seconds.
func Status(t testing.TB, n *node.Node) node.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := n.Status(ctx)
	if err != nil {
		t.Fatalf("status of member %d: %v", n.ID(), err)
	}
	return st
}

// Context is a context that ends after d or when t ends, whichever comes
// first: the deadline of a test's calls.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Client is a client of endpoints, closed when t ends.
func Client(t testing.TB, endpoints ...string) *client.Client {
	t.Helper()
	cl, err := client.New(endpoints, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// LoggedTags reads n's committed log and returns the tag of each command
// on key that carried one, by the command's operation ("grant", "renew",
// "release"): what the chaos harness's audit matches a history against.
func LoggedTags(t testing.TB, n *node.Node, key string) map[string]uint64 {
	t.Helper()
	cmds, _, err := n.CommittedLog(Context(t, 10*time.Second))
	if err != nil {
		t.Fatalf("committed log of member %d: %v", n.ID(), err)
	}
	tags := map[string]uint64{}
	for _, cmd := range cmds {
		if cmd.Key == key && cmd.Tag != 0 {
			tags[cmd.Op] = cmd.Tag
		}
	}
	return tags
}

// WaitFor polls cond every few milliseconds until it holds, and fails t if
// it does not within timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Receive reads n values from c within 20 seconds (a watch's events), and
// fails t if they do not come in time or c is closed first, saying why
// with ended (a watch's Err).
func Receive[T any](t testing.TB, c <-chan T, n int, ended func() error) []T {
	t.Helper()
	var got []T
	timeout := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case v, ok := <-c:
			if !ok {
				t.Fatalf("ended after %d of %d values: %v", len(got), n, ended())
			}
			got = append(got, v)
		case <-timeout:
			t.Fatalf("only %d of %d values came: %+v", len(got), n, got)
		}
	}
	return got
}

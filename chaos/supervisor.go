// Package chaos is raftlock's Jepsen-style harness: a supervisor for real
// `raftlock node` processes, per-link TCP proxies for partitions, clock-fault
// control, nemesis schedules drawn from a seed, and a contended workload
// whose every operation is recorded as a history for the checker.
package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/periodic"
	"github.com/raftlock/raftlock/internal/procattr"
	"github.com/raftlock/raftlock/internal/procgroup"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/peer"
)

// ClusterSpec describes the cluster a Supervisor runs.
type ClusterSpec struct {
	Bin       string   // the raftlock executable
	Dir       string   // data directories and logs go here
	Nodes     int      // 3 or 5
	ExtraArgs []string // passed to every node (e.g. --unsafe-bug NAME)
	Seed      uint64   // the link proxies' loss and jitter draws
	// SnapshotEvery and SnapshotKeep are passed to every member as
	// --snapshot-every and --snapshot-keep; zero leaves the member's default.
	SnapshotEvery uint64
	SnapshotKeep  uint64
	// Transfer is how members stream snapshots (chunk size, frame limit,
	// snapshots by entries); zero fields leave the member's defaults.
	Transfer Transfer
	// Membership: the run may add members (up to spareMembers), whose
	// addresses are drawn at the start.
	Membership bool
	// API: every member serves the API port too (--api), for clients of
	// the gRPC and HTTP/JSON protocols (--protocols).
	API bool
}

// Crash is a member process that exited without the harness killing it.
type Crash struct {
	Node   int
	Err    string // how it exited
	Reason string // the last panic or fatal line of its log, if any
	Log    string // its log file
}

func (c Crash) String() string {
	s := fmt.Sprintf("node %d (%s", c.Node, c.Err)
	if c.Reason != "" {
		s += ": " + c.Reason
	}
	return s + ", see " + c.Log + ")"
}

// Supervisor runs the members as child processes, every directed peer
// link through its own Proxy, every member with fault injection enabled.
// Members dial member j at j's Gateway, which routes each stream to its
// link's Proxy by the sender its hello names: every member holds the same
// peer addresses, as a replicated address book (membership changes,
// snapshots) requires. The member set changes under the membership
// nemesis: AddMember and RemoveMember; IDs lists the current members,
// AllIDs every member the run had.
type Supervisor struct {
	spec ClusterSpec
	// nodes are every member the run may have, the spares included: made
	// by NewSupervisor, never added to or removed from after, so their
	// addresses are read without the lock; the rest of each under mu.
	nodes     map[int]*memberProc
	clusterID string // fixed at the start: joined members learn it from the cluster
	cl        *client.Client
	stats     *statsTracker

	mu      sync.Mutex
	members []int // current members, sorted; nil: 1..spec.Nodes
	retired []int // removed members, in removal order
	next    int   // the next new member's id
	proxies map[[2]int]*Proxy
	crashes []Crash
	// ports hands out the members' addresses, each once: they are drawn
	// before any member listens, and a member that is down leaves its
	// ports free to the kernel.
	ports freeport.Picker
}

// memberProc is one member of the run: its addresses and gateway, fixed
// at the start, and its process, under Supervisor.mu.
type memberProc struct {
	id                 int
	raft, client, http string // real peer listen, client and HTTP addresses
	api                string // its API address; "": none (ClusterSpec.API)
	gateway            *Gateway

	joined   bool          // added by AddMember: it joins the cluster
	retiring bool          // asked to leave: its exit 0 is no crash
	cmd      *exec.Cmd     // nil: not running
	exited   chan struct{} // closed when cmd has exited
	paused   bool          // stopped by Pause
	clocked  bool          // its clock is off true
}

// stopped forgets m's process and what it was doing.
func (m *memberProc) stopped() { m.cmd, m.paused = nil, false }

// spareMembers is how many members a run may add (a 30 s membership run
// replaces 5 or 6): their client addresses are drawn at the start, so the
// workload's clients know them. Past it a membership fault fails (counted,
// not a violation).
const spareMembers = 24

// NewSupervisor picks addresses and starts the link proxies; Start runs the
// members.
func NewSupervisor(spec ClusterSpec) (*Supervisor, error) {
	if spec.Nodes < 1 {
		return nil, errors.New("need at least one node")
	}
	s := &Supervisor{spec: spec, nodes: map[int]*memberProc{}, next: spec.Nodes + 1,
		proxies: map[[2]int]*Proxy{}, stats: newStatsTracker()}
	for id := 1; id <= spec.Nodes+s.spare(); id++ {
		if err := s.addresses(id); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.members = s.IDs()
	real := map[uint64]string{}
	for _, j := range s.members {
		real[uint64(j)] = s.nodes[j].raft
		s.addLinks(j)
	}
	s.clusterID = peer.FormatClusterID(peer.ClusterIDFromPeers(real))
	var err error
	if s.cl, err = client.New(s.AllClientAddrs(), client.Options{}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// addresses draws member id's real peer, client and HTTP addresses and
// starts its gateway.
func (s *Supervisor) addresses(id int) error {
	m := &memberProc{id: id}
	addrs := []*string{&m.raft, &m.client, &m.http}
	if s.spec.API {
		addrs = append(addrs, &m.api)
	}
	for _, a := range addrs {
		addr, err := s.ports.Addr()
		if err != nil {
			return err
		}
		*a = addr
	}
	g, err := NewGateway(id, func(from int) *Proxy {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.proxies[[2]int{from, id}]
	})
	if err != nil {
		return err
	}
	m.gateway = g
	s.nodes[id] = m
	return nil
}

// addLinks creates the directed links between member id and the current
// members, both ways.
func (s *Supervisor) addLinks(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.idsLocked() {
		if j == id {
			continue
		}
		for _, l := range [][2]int{{id, j}, {j, id}} {
			if s.proxies[l] == nil {
				s.proxies[l] = newLink(s.nodes[l[1]].raft, s.spec.Seed^uint64(l[0]<<8|l[1]))
			}
		}
	}
}

// IDs lists the current members' ids in order: 1..N, then as the
// membership nemesis replaces members, without the removed ones and with
// the added ones.
func (s *Supervisor) IDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idsLocked()
}

func (s *Supervisor) idsLocked() []int {
	if s.members != nil {
		return slices.Clone(s.members)
	}
	ids := make([]int, s.spec.Nodes)
	for i := range ids {
		ids[i] = i + 1
	}
	return ids
}

// AllIDs lists every member the run had, removed ones included, in order.
func (s *Supervisor) AllIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := append(s.idsLocked(), s.retired...)
	slices.Sort(ids)
	return ids
}

// Retired lists the removed members, in removal order.
func (s *Supervisor) Retired() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.retired)
}

// spare is how many members this run may add.
func (s *Supervisor) spare() int {
	if s.spec.Membership {
		return spareMembers
	}
	return 0
}

// ClientAddrs lists the current members' client addresses in id order.
func (s *Supervisor) ClientAddrs() []string {
	var out []string
	for _, id := range s.IDs() {
		out = append(out, s.nodes[id].client)
	}
	return out
}

// AllClientAddrs lists the client addresses of the first members and of
// every member the run may add, so a client made at the start still
// reaches the cluster after every first member was replaced.
func (s *Supervisor) AllClientAddrs() []string {
	var out []string
	for id := 1; id <= s.spec.Nodes+s.spare(); id++ {
		if m, ok := s.nodes[id]; ok {
			out = append(out, m.client)
		}
	}
	return out
}

// ClientAddr returns member id's client address.
func (s *Supervisor) ClientAddr(id int) string { return s.node(id).client }

// node is member id, or an empty one for an id the run never had.
func (s *Supervisor) node(id int) *memberProc {
	if m := s.nodes[id]; m != nil {
		return m
	}
	return &memberProc{id: id}
}

// Start launches every member.
func (s *Supervisor) Start() error {
	for _, id := range s.IDs() {
		if err := s.StartNode(id); err != nil {
			return err
		}
	}
	return nil
}

// StartNode launches member id (again) from its data directory. Its view
// of each peer is that link's proxy.
func (s *Supervisor) StartNode(id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.nodes[id]
	if m == nil {
		return fmt.Errorf("start node %d: not a member of this run", id)
	}
	if m.cmd != nil {
		return nil
	}
	logPath := filepath.Join(s.spec.Dir, fmt.Sprintf("node-%d.log", id))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start node %d: %w", id, err)
	}
	cmd := exec.Command(s.spec.Bin, s.argsLocked(m).Argv()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procattr.Child()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start node %d: %w", id, err)
	}
	s.stats.Started(id)
	done := make(chan struct{})
	go s.watch(m, cmd, logf, logPath, done)
	m.cmd, m.exited = cmd, done
	m.paused = false
	m.clocked = false // a new process starts with a true clock
	return nil
}

// argsLocked is member m's command line: a first member bootstraps with
// every first member's gateway as its peers; one AddMember added joins
// through the current members (once its data directory holds data it
// restarts from its log).
func (s *Supervisor) argsLocked(m *memberProc) embed.Args {
	t := s.spec.Transfer
	a := embed.Args{ID: uint64(m.id), PeerListen: m.raft, Listen: m.client, HTTP: m.http, API: m.api, Data: s.DataDir(m.id),
		FaultInjection: true, LogLevel: "info",
		SnapshotEvery: s.spec.SnapshotEvery, SnapshotKeep: s.spec.SnapshotKeep,
		SnapshotChunkSize: max(t.ChunkSize, 0), PeerFrameLimit: max(t.FrameLimit, 0), SnapshotByEntries: t.ByEntries,
		Extra: s.spec.ExtraArgs}
	if m.joined {
		for _, j := range s.idsLocked() {
			if j != m.id {
				a.Join = append(a.Join, s.nodes[j].client)
			}
		}
		return a
	}
	a.Peers = map[uint64]string{}
	for j := 1; j <= s.spec.Nodes; j++ {
		a.Peers[uint64(j)] = s.nodes[j].gateway.Addr()
	}
	a.ClusterID = s.clusterID
	return a
}

// watch waits for member m's process cmd to exit, and records a crash
// when nobody killed it.
func (s *Supervisor) watch(m *memberProc, cmd *exec.Cmd, logf *os.File, logPath string, done chan struct{}) {
	defer close(done)
	err := cmd.Wait()
	logf.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Kill forgets the process before signalling it: one still known
	// here died on its own (a panic, a fatal error).
	crashed := m.cmd == cmd
	if crashed {
		m.stopped()
	}
	if m.retiring && err == nil {
		crashed = false // removed from the configuration, it stopped itself
	}
	if crashed {
		s.crashes = append(s.crashes, Crash{Node: m.id, Err: fmt.Sprint(err), Reason: procgroup.ExitReason(logPath), Log: logPath})
	}
}

// Crashes lists the members that exited without being killed.
func (s *Supervisor) Crashes() []Crash {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Crash(nil), s.crashes...)
}

// Metrics reads member id's metrics and credits the snapshot counters to
// the incarnation that answered.
func (s *Supervisor) Metrics(ctx context.Context, id int) (MemberMetrics, error) {
	inc := s.stats.Incarnation(id)
	m, err := fetchMetrics(ctx, s.node(id).http)
	if err != nil {
		return m, fmt.Errorf("metrics of node %d: %w", id, err)
	}
	s.stats.Observe(id, inc, m)
	return m, nil
}

// ReadAllMetrics reads every running member's metrics once, each with a
// short timeout (a paused member cannot answer; its last reading stands).
func (s *Supervisor) ReadAllMetrics(ctx context.Context) {
	var wg sync.WaitGroup
	for _, id := range s.IDs() {
		if !s.Running(id) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			s.Metrics(cctx, id)
		}()
	}
	wg.Wait()
}

// PollMetrics reads every member's metrics every period until ctx ends,
// so that a member paused and then killed still has a recent reading.
func (s *Supervisor) PollMetrics(ctx context.Context, period time.Duration) {
	periodic.Run(ctx, period, func() { s.ReadAllMetrics(ctx) })
}

// Stats returns the restart and snapshot counts so far.
func (s *Supervisor) Stats() ClusterStats { return s.stats.Totals() }

// MemberStats sums member id's snapshot counts over its processes.
func (s *Supervisor) MemberStats(id int) MemberMetrics { return s.stats.Member(id) }

// Kill reads member id's metrics (the counters die with the process),
// sends it SIGKILL and waits for it to die.
func (s *Supervisor) Kill(ctx context.Context, id int) {
	if s.Running(id) && !s.Paused(id) {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		s.Metrics(cctx, id)
		cancel()
	}
	s.kill(id)
}

// kill sends SIGKILL to member id at once and waits for it to die.
func (s *Supervisor) kill(id int) {
	s.mu.Lock()
	m := s.node(id)
	cmd, done := m.cmd, m.exited
	m.stopped()
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// RestartNode kills member id with SIGKILL and starts it again from its
// data directory, waiting until it serves its metrics or exits on its own
// (which Crashes then reports).
func (s *Supervisor) RestartNode(ctx context.Context, id int) error {
	s.Kill(ctx, id)
	if err := s.StartNode(id); err != nil {
		return err
	}
	for s.Running(id) {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := s.Metrics(cctx, id)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil // it exited on its own: a crash, recorded
}

// Running reports whether member id's process is up.
func (s *Supervisor) Running(id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node(id).cmd != nil
}

// Paused reports whether member id is stopped by Pause.
func (s *Supervisor) Paused(id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node(id).paused
}

// Pause stops member id with SIGSTOP; Resume continues it.
func (s *Supervisor) Pause(id int) { s.signal(id, syscall.SIGSTOP, true) }

// Resume continues a paused member.
func (s *Supervisor) Resume(id int) { s.signal(id, syscall.SIGCONT, false) }

func (s *Supervisor) signal(id int, sig syscall.Signal, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.node(id); m.cmd != nil {
		m.cmd.Process.Signal(sig)
		m.paused = paused
	}
}

// SetLinks lets traffic flow on link i->j only where connected(i, j).
func (s *Supervisor) SetLinks(connected func(i, j int) bool) {
	for link, p := range s.links() {
		p.SetBlocked(!connected(link[0], link[1]))
	}
}

// Heal restores every cut link.
func (s *Supervisor) Heal() { s.SetLinks(func(int, int) bool { return true }) }

// CutLinks cuts exactly the directed links given (from, to) and restores
// every other: a one-way partition when a link's reverse is not listed.
func (s *Supervisor) CutLinks(links [][2]int) {
	cut := map[[2]int]bool{}
	for _, l := range links {
		cut[l] = true
	}
	s.SetLinks(func(i, j int) bool { return !cut[[2]int{i, j}] })
}

// SetLinkFault applies f to the directed links given.
func (s *Supervisor) SetLinkFault(links [][2]int, f LinkFault) {
	all := s.links()
	for _, l := range links {
		if p := all[l]; p != nil {
			p.SetFault(f)
		}
	}
}

// ArmSnapshotCut arms every link from a current member into member to to
// cut its next snapshot stream once frac of the data went through
// (Proxy.CutSnapshot); each link's outcome comes on the channel returned.
func (s *Supervisor) ArmSnapshotCut(to int, frac float64) <-chan SnapshotCut {
	all := s.links()
	done := make(chan SnapshotCut, len(all))
	for _, from := range s.IDs() {
		if p := all[[2]int{from, to}]; p != nil && from != to {
			p.CutSnapshot(from, to, frac, done)
		}
	}
	return done
}

// HoldAfterSnapshot arms (on) or disarms every link into member to to
// hold its messages once a snapshot stream starts (Proxy.HoldAfterSnapshot).
func (s *Supervisor) HoldAfterSnapshot(to int, on bool) {
	for l, p := range s.links() {
		if l[1] == to && l[0] != to {
			p.HoldAfterSnapshot(on)
		}
	}
}

// DisarmSnapshotCut disarms every link into member to.
func (s *Supervisor) DisarmSnapshotCut(to int) {
	for l, p := range s.links() {
		if l[1] == to {
			p.CutSnapshot(l[0], to, 0, nil)
		}
	}
}

// HealNet clears every link's delay and loss.
func (s *Supervisor) HealNet() {
	for _, p := range s.links() {
		p.SetFault(LinkFault{})
	}
}

// links returns every directed link's proxy, current members or not.
func (s *Supervisor) links() map[[2]int]*Proxy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.proxies)
}

// Links lists every directed peer link between current members, in order.
func (s *Supervisor) Links() [][2]int {
	var out [][2]int
	for _, i := range s.IDs() {
		for _, j := range s.IDs() {
			if i != j {
				out = append(out, [2]int{i, j})
			}
		}
	}
	return out
}

// LinkCounts returns each directed link's totals.
func (s *Supervisor) LinkCounts() map[[2]int]ProxyCounts {
	out := map[[2]int]ProxyCounts{}
	for l, p := range s.links() {
		out[l] = p.Counts()
	}
	return out
}

// SetClock sets member id's clock rate and adds offsetMS to its reading,
// through its fault injection endpoint. A member that is (re)starting is
// tried again for a few seconds.
func (s *Supervisor) SetClock(ctx context.Context, id int, rate float64, offsetMS int64) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"rate":%g,"offset_ms":%d}`, rate, offsetMS)
	for {
		err := s.postClock(ctx, id, body)
		if err == nil {
			s.mu.Lock()
			s.node(id).clocked = rate != 1 || offsetMS != 0
			s.mu.Unlock()
			return nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Supervisor) postClock(ctx context.Context, id int, body string) error {
	resp, err := memberRequest(ctx, "POST", s.node(id).http, "/debug/clock", strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("set clock of node %d: %w", id, err)
	}
	resp.Body.Close()
	return nil
}

// memberRequest sends a request to the member HTTP port at addr (its
// /debug and /metrics endpoints) and returns the answer, for the caller
// to close, when it is 200 OK; any other status is an error naming it.
func memberRequest(ctx context.Context, method, addr, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, body)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, errors.New(resp.Status)
	}
	return resp, nil
}

// Status asks every member for its status; unreachable members are absent.
func (s *Supervisor) Status(ctx context.Context) map[int]wire.Status {
	out := map[int]wire.Status{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range s.IDs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if st, err := s.cl.Status(cctx, s.node(id).client); err == nil {
				mu.Lock()
				out[id] = st
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// StatusOf asks member id for its status.
func (s *Supervisor) StatusOf(ctx context.Context, id int) (wire.Status, error) {
	return s.cl.Status(ctx, s.node(id).client)
}

// Leader returns the member that says it leads, or 0.
func (s *Supervisor) Leader(ctx context.Context) int {
	for id, st := range s.Status(ctx) {
		if st.Role == "leader" {
			return id
		}
	}
	return 0
}

// WaitReady waits until a leader answers a linearizable read.
func (s *Supervisor) WaitReady(ctx context.Context) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.cl.Get(cctx, "raftlock-harness-probe")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// HealAll ends every fault: resumes paused members, restarts killed ones,
// resets clocks and heals the links. It returns what it did, for the history.
func (s *Supervisor) HealAll(ctx context.Context) (resumed, started, clocks []int, err error) {
	resumed, clocks = s.faulted()
	s.resumeAndHeal(resumed)
	for _, id := range s.IDs() {
		if !s.Running(id) {
			if err := s.StartNode(id); err != nil {
				return resumed, started, clocks, err
			}
			started = append(started, id)
		}
	}
	for _, id := range clocks {
		if e := s.SetClock(ctx, id, 1, 0); e != nil && err == nil {
			err = e
		}
	}
	return resumed, started, clocks, err
}

// EndFaults ends the faults of a cluster about to stop (a run cut
// short): resumes paused members, heals the links and resets the clocks
// of the members that run, but restarts none (a killed member's clock
// went with its process). It returns what it did, for the history.
func (s *Supervisor) EndFaults(ctx context.Context) (resumed, clocks []int, err error) {
	resumed, skewed := s.faulted()
	s.resumeAndHeal(resumed)
	for _, id := range skewed {
		if !s.Running(id) {
			continue
		}
		if e := s.SetClock(ctx, id, 1, 0); e != nil {
			err = cmp.Or(err, e)
			continue
		}
		clocks = append(clocks, id)
	}
	return resumed, clocks, err
}

// faulted are the members paused and those whose clock was changed, in
// id order.
func (s *Supervisor) faulted() (paused, clocked []int) {
	s.mu.Lock()
	for id, m := range s.nodes {
		if m.paused {
			paused = append(paused, id)
		}
		if m.clocked {
			clocked = append(clocked, id)
		}
	}
	s.mu.Unlock()
	sort.Ints(paused)
	sort.Ints(clocked)
	return paused, clocked
}

// resumeAndHeal resumes the members paused and heals every link.
func (s *Supervisor) resumeAndHeal(paused []int) {
	for _, id := range paused {
		s.Resume(id)
	}
	s.Heal()
	s.HealNet()
}

// Close kills every member and stops the proxies.
func (s *Supervisor) Close() {
	s.mu.Lock()
	var running []int
	for id, m := range s.nodes {
		if m.cmd != nil {
			running = append(running, id)
		}
	}
	proxies := maps.Clone(s.proxies)
	s.mu.Unlock()
	for _, id := range running {
		s.kill(id)
	}
	for _, m := range s.nodes {
		m.gateway.Close()
	}
	for _, p := range proxies {
		p.Close()
	}
	if s.cl != nil {
		s.cl.Close()
	}
}

// DataDir is member id's data directory.
func (s *Supervisor) DataDir(id int) string {
	return filepath.Join(s.spec.Dir, fmt.Sprintf("data-%d", id))
}

// PeerAddr returns member id's real peer address (not a proxy's).
func (s *Supervisor) PeerAddr(id int) string { return s.node(id).raft }

// ClusterID is the cluster id the members are started with.
func (s *Supervisor) ClusterID() uint64 {
	v, _ := peer.ParseClusterID(s.clusterID)
	return v
}

// Incarnation reads member id's incarnation from its data directory's
// identity.json (0 before its first boot wrote one).
func (s *Supervisor) Incarnation(id int) uint64 {
	b, err := os.ReadFile(filepath.Join(s.DataDir(id), "identity.json"))
	if err != nil {
		return 0
	}
	var j struct {
		Incarnation string `json:"incarnation"`
	}
	if json.Unmarshal(b, &j) != nil {
		return 0
	}
	v, _ := strconv.ParseUint(j.Incarnation, 16, 64)
	return v
}

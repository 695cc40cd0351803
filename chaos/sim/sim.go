package sim

import (
	crand "crypto/rand"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/member"
)

// Stats count what a run did.
type Stats struct {
	SimSeconds float64              `json:"sim_seconds"`
	Invoked    int                  `json:"invoked"` // operations started (what --max-ops bounds)
	Ops        int                  `json:"ops"`     // operations completed
	OK         int                  `json:"ok"`
	Fail       int                  `json:"fail"`
	Info       int                  `json:"info"`
	Faults     map[fault.Family]int `json:"faults"`
	Messages   int                  `json:"messages"`
	Dropped    int                  `json:"dropped"`
	Duplicated int                  `json:"duplicated"`
	Restarts   int                  `json:"restarts"`
	Snapshots  int                  `json:"snapshots"`
	Installed  int                  `json:"snapshots_installed"`
	LostWrites int                  `json:"lost_unsynced_writes"`
	IOErrors   int                  `json:"io_errors"`
	// crashes that hit their moment: right after a compaction, right
	// after a snapshot install
	CrashAfterSnapshot int `json:"crash_after_snapshot"`
	CrashAfterInstall  int `json:"crash_after_install"`
	CrashAtGrantCommit int `json:"crash_at_grant_commit"`
	// leaders cut off with their clock nearly stopped (leaderfault.go)
	UnawareLeaders int `json:"unaware_leaders"`
	// faults aimed at a snapshot stream that met one in flight
	TransferFaults int `json:"snapshot_transfer_faults"`
	SlowSyncs      int `json:"slow_syncs"`
	// grants applied whose requester had left before their proposer
	// stopped leading, and ghost releases proposed, over every member
	OrphanAims    int `json:"orphan_aims"` // orphanAGrant met a Grant
	OrphanGrants  int `json:"orphan_grants_applied"`
	GhostReleases int `json:"ghost_releases"`
	// snapshot streams started, broken (nothing delivered, or with
	// snapshot-partial what was spooled), and delivered truncated
	SnapTransfers       int    `json:"snapshot_transfers"`
	SnapTransfersBroken int    `json:"snapshot_transfers_broken"`
	SnapPartial         int    `json:"snapshots_partial,omitempty"`
	Events              int    `json:"events"`
	CommitIndex         uint64 `json:"commit_index"`
	Unconverged         bool   `json:"unconverged,omitempty"`
	// Held is how many of Config.Held locks the fill took, in
	// FillSeconds of simulated time.
	Held        int     `json:"held,omitempty"`
	FillSeconds float64 `json:"fill_seconds,omitempty"`
	MembershipStats
}

// Result is what a run recorded, for the checker.
type Result struct {
	Header  map[string]any
	Events  []history.Event
	Digests []checker.NodeDigest
	Log     *checker.CommittedLog
	// Crashes are members that panicked or stopped on an internal error
	// (not an injected one): checker.Options.Crashes.
	Crashes []string
	// Safety are state machine safety violations: two members applied
	// different (term, commands) at one index.
	Safety []string
	// SnapshotsCorrupt counts, by member id, the snapshots each member
	// refused because their data did not decode
	// (raftlock_snapshots_corrupt_total summed over its restarts).
	SnapshotsCorrupt map[int]int
	// Newcomers is the membership family's evidence for the checker's
	// newcomer-stuck check; nil when the family was not enabled.
	Newcomers *checker.Newcomers
	// Backups are the backups the backup taker got (backup.go).
	Backups []checker.Backup
	Stats   Stats
}

// sim is one run's whole world. Everything happens on the goroutine that
// called Run, in the order of the event queue.
type sim struct {
	cfg     Config
	sch     sched
	tr      *tracer
	nodes   []*node // index id-1
	clients []*client
	keys    []string

	rngNet  *rand.Rand // message delays, loss, duplication
	rngDisk *rand.Rand // I/O errors, slow syncs, crash prefixes
	rngMisc *rand.Rand // tick phases

	links map[[2]uint64]*link // directed (from, to) member links
	// brokenTransfer is what a broken snapshot stream does (transfer.go),
	// chosen once from the planted bug; onTransfer, when set, sees each
	// snapshot stream start (a fault aimed at transfers).
	brokenTransfer func(*transfer)
	onTransfer     func(*transfer)
	// base link for client traffic (clients are never partitioned)
	events []history.Event
	store  *workload.FencedStore

	nextProc   int
	nextHandle uint64
	opsStarted int
	stopOps    bool // the workload's time is over

	committed map[uint64]appliedAt // the one global committed log
	maxIndex  uint64

	mem   *membership // the membership family's changes (membership.go)
	res   Result
	stats Stats
}

// appliedAt is what the first member to apply an index applied there.
type appliedAt struct {
	node, incarnation uint64
	entry             member.AppliedEntry
}

// Run runs one simulation. It replaces crypto/rand.Reader for its duration
// (raft draws election timeouts from it) and so must not run concurrently
// with anything else reading it: the swarm runs seeds in subprocesses.
func Run(cfg Config) (*Result, error) {
	cfg.Defaults()
	if cfg.MaxUncommitted == 0 {
		cfg.MaxUncommitted = SeedMaxUncommitted(cfg.Seed)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The one piece of process-global state the simulator touches: raft's
	// election timeouts come from crypto/rand.Reader, so a run installs a
	// seeded reader and puts the real one back when it ends.
	saved := crand.Reader
	crand.Reader = seededReader{rand.New(rand.NewPCG(cfg.Seed, 0x72616e64))}
	defer func() { crand.Reader = saved }()

	s := newSim(cfg)
	if err := s.run(); err != nil {
		return nil, err
	}
	return &s.res, nil
}

func newSim(cfg Config) *sim {
	s := &sim{cfg: cfg, links: map[[2]uint64]*link{}, committed: map[uint64]appliedAt{},
		rngNet:  rand.New(rand.NewPCG(cfg.Seed, 0x6e6574)),
		rngDisk: rand.New(rand.NewPCG(cfg.Seed, 0x6469736b)),
		rngMisc: rand.New(rand.NewPCG(cfg.Seed, 0x6d697363)),
	}
	s.tr = newTracer(cfg.Trace, &s.sch)
	s.brokenTransfer = s.brokenTransferHook(cfg.Bug)
	s.stats.Faults = map[fault.Family]int{}
	s.keys = workload.Keys(cfg.Keys)
	s.store = workload.NewResource(s, cfg.Resource)
	s.mem = newMembership(s)
	for i := 1; i <= cfg.Nodes; i++ {
		for j := 1; j <= cfg.Nodes; j++ {
			if i != j {
				s.links[[2]uint64{uint64(i), uint64(j)}] = &link{}
			}
		}
	}
	return s
}

// memberIDs lists the members not removed from the configuration, in
// id order: the bootstrap members, then the ones membership changes added.
func (s *sim) memberIDs() []int {
	ids := make([]int, 0, len(s.nodes))
	for _, n := range s.nodes {
		if !n.retired {
			ids = append(ids, int(n.id))
		}
	}
	return ids
}

// voters is the configuration the cluster was bootstrapped with, which a
// fresh disk starts from (a joiner's too, as raftlock node --join's).
func (s *sim) voters() []uint64 {
	v := make([]uint64, s.cfg.Nodes)
	for i := range v {
		v[i] = uint64(i + 1)
	}
	return v
}

// run carries a run out in the chaos harness's phases: boot the members
// and fill the table, run the workload under the nemesis, heal and settle,
// then collect what the checks need.
func (s *sim) run() error {
	s.boot()
	end := s.workload()
	s.settle(end)
	s.collect()
	if s.tr.on() {
		s.tr.printf("end events=%d ops=%d commit=%d converged=%v", s.stats.Events, s.stats.Ops, s.maxIndex, !s.stats.Unconverged)
	}
	return s.tr.flush()
}

// boot writes the history's header and starts the members and clients.
func (s *sim) boot() {
	cfg := s.cfg
	h := workload.Header{Seed: cfg.Seed, Nodes: cfg.Nodes, Nemeses: cfg.Faults, Clients: cfg.Clients, Keys: s.keys,
		LeaseMin: cfg.LeaseMin, LeaseMax: cfg.LeaseMax, Time: cfg.Duration, Bug: cfg.Bug,
		SnapshotEvery: cfg.SnapshotEvery, SnapshotKeep: cfg.SnapshotKeep, Held: cfg.Held, KeySize: cfg.KeySize}
	extra := map[string]any{"simulated": true, "max_ops": cfg.MaxOps, "max_faults": cfg.MaxFaults,
		"skip_faults": cfg.SkipFaults, "max_uncommitted": cfg.MaxUncommitted}
	if cfg.Resource == workload.Unfenced {
		extra["resource"] = string(cfg.Resource) // only then: a default run's header is as it was
	}
	s.res.Header = h.Map(extra)
	if s.tr.on() {
		s.tr.printf("run seed=%d nodes=%d duration=%v faults=%v bug=%q max-ops=%d max-faults=%d skip-faults=%v held=%d key-size=%d max-uncommitted=%d",
			cfg.Seed, cfg.Nodes, cfg.Duration, cfg.Faults, cfg.Bug, cfg.MaxOps, cfg.MaxFaults, cfg.SkipFaults, cfg.Held, cfg.KeySize, cfg.MaxUncommitted)
	}
	for i := 1; i <= cfg.Nodes; i++ {
		n := &node{s: s, id: uint64(i), disk: NewStore(), handles: map[uint64]*attempt{}}
		s.nodes = append(s.nodes, n)
		s.start(n)
	}
	for i := range cfg.Clients {
		s.clients = append(s.clients, s.newClient(i))
	}
}

// workload fills the table, then runs the clients, the backup taker and
// the nemesis for the configured duration, and returns when it ended.
func (s *sim) workload() (end int64) {
	cfg := s.cfg
	// The workload's time starts after the fill (0 without one, so a run
	// without held locks is the run it always was).
	base := s.fill()
	end = base + int64(cfg.Duration)
	for _, c := range s.clients {
		// Clients start once a leader could exist, staggered.
		s.sch.at(base+int64(300*time.Millisecond)+int64(c.rng.IntN(50))*int64(time.Millisecond), c.next)
	}
	s.res.Backups = []checker.Backup{} // taken: the check decides even if none was answered
	s.sch.at(base+int64(400*time.Millisecond), s.newBackupTaker().nextBackup)
	nem := newNemesis(s)
	if len(cfg.Faults) > 0 {
		s.sch.at(base+int64(500*time.Millisecond), nem.step)
	}
	s.sch.at(end, func() {
		s.stopOps = true
		nem.stop()
	})
	s.sch.runUntil(end, nil)
	return end
}

// settle is the post-run sequence, as the chaos harness's: every fault is
// healed; let the operations in flight end (each has a deadline of a few
// seconds), restart every member that can be, read every key, and
// restart each member once more from its disk, then let the cluster
// converge. A membership change under way runs to its end too (each of
// its steps is bounded, 55 s in all).
func (s *sim) settle(end int64) {
	s.sch.runUntil(end+int64(30*time.Second), func() bool { return s.clientsIdle() && !s.mem.busy() })
	if s.mem.busy() {
		s.sch.runUntil(s.sch.now+int64(60*time.Second), func() bool { return !s.mem.busy() })
	}
	s.restartStopped()
	s.waitConverged(10 * time.Second)
	s.finalReads()
	for _, n := range s.nodes {
		if n.dead || n.retired {
			continue
		}
		fault.Kill{Nodes: []int{int(n.id)}}.Record(s)
		s.crash(n, true)
		s.sch.runUntil(s.sch.now+int64(50*time.Millisecond), nil)
		s.start(n)
		fault.Start{Nodes: []int{int(n.id)}}.Record(s)
		s.waitConverged(5 * time.Second)
	}
	if !s.waitConverged(20 * time.Second) {
		s.stats.Unconverged = true
	}
}

// collect gathers the result: the members' digests and snapshot counts,
// the committed log, the membership evidence, the events and the stats.
func (s *sim) collect() {
	for _, n := range s.nodes {
		if st, ok := s.status(n); ok {
			s.res.Digests = append(s.res.Digests, checker.NodeDigest{Node: int(n.id), Applied: st.Applied, Digest: st.Digest})
		}
	}
	s.res.SnapshotsCorrupt = map[int]int{}
	for _, n := range s.nodes {
		s.res.SnapshotsCorrupt[int(n.id)] = n.snapshotsCorrupt()
		s.stats.OrphanGrants += n.counted(member.OrphanGrantsApplied)
		s.stats.GhostReleases += n.counted(member.GhostReleases)
	}
	s.res.Log = s.committedLog()
	if slices.Contains(s.cfg.Faults, fault.FamilyMembership) {
		s.res.Newcomers = s.mem.evidence()
	}
	s.res.Events = s.events
	s.stats.SimSeconds = float64(s.sch.now) / 1e9
	s.stats.CommitIndex = s.maxIndex
	s.stats.Invoked = s.opsStarted
	s.stats.Events = len(s.events)
	s.res.Stats = s.stats
}

// waitConverged runs the simulation until every member is up and has
// applied the leader's commit index, or d passes. It reports convergence.
func (s *sim) waitConverged(d time.Duration) bool {
	deadline := s.sch.now + int64(d)
	for s.sch.now < deadline {
		if s.converged() {
			return true
		}
		s.sch.runUntil(s.sch.now+int64(20*time.Millisecond), nil)
	}
	return s.converged()
}

func (s *sim) converged() bool {
	var leader *node
	for _, n := range s.nodes {
		if !n.up() {
			if n.dead || n.retired {
				continue
			}
			return false
		}
		if st, ok := s.status(n); ok && st.Role == "leader" {
			leader = n
		}
	}
	if leader == nil {
		return false
	}
	want, _ := s.status(leader)
	for _, n := range s.nodes {
		if st, ok := s.status(n); ok {
			if st.Applied != want.Commit || st.Applied != want.Applied || st.Leader != want.ID {
				return false
			}
		}
	}
	return true
}

func (s *sim) newProc() history.Process {
	p := history.Process(s.nextProc)
	s.nextProc++
	return p
}

// Record appends a history event at the current simulated time.
func (s *sim) Record(p history.Process, typ, f, key string, v history.Value) history.Event {
	e := history.Event{Index: int64(len(s.events)), Time: s.sch.now, Process: p, Type: typ, F: f, Key: key, Value: v}
	s.events = append(s.events, e)
	if s.tr.on() {
		s.tr.printf("history %d %v %s %s %s %s", e.Index, p, typ, f, key, valueString(v))
	}
	return e
}

// recordApplied adds a member's applied entries to the one global log and
// checks state machine safety: no two members apply different things at
// one index.
func (s *sim) recordApplied(n *node, applied []member.AppliedEntry) {
	for _, a := range applied {
		prev, ok := s.committed[a.Index]
		if !ok {
			s.committed[a.Index] = appliedAt{node: n.id, incarnation: n.incarnation, entry: a}
			s.maxIndex = max(s.maxIndex, a.Index)
			continue
		}
		if !sameEntry(prev.entry, a) {
			msg := fmt.Sprintf("at index %d node %d (start %d) applied term %d %s, node %d (start %d) applied term %d %s",
				a.Index, prev.node, prev.incarnation, prev.entry.Term, commandsString(prev.entry.Commands),
				n.id, n.incarnation, a.Term, commandsString(a.Commands))
			if len(s.res.Safety) < 20 {
				s.res.Safety = append(s.res.Safety, msg)
			}
			if s.tr.on() {
				s.tr.printf("SAFETY %s", msg)
			}
		}
	}
}

func sameEntry(a, b member.AppliedEntry) bool {
	return a.Index == b.Index && a.Term == b.Term && slices.Equal(a.Commands, b.Commands)
}

func commandsString(cs []member.LoggedCommand) string {
	var b strings.Builder
	b.WriteString("[")
	for i, c := range cs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s(%s tag=%d)=%s/%d", c.Op, c.Key, c.Tag, c.Status, c.Token)
	}
	b.WriteString("]")
	return b.String()
}

// committedLog is the global log as checker.CommittedLog: final when it
// holds every index from 1 and the members converged.
func (s *sim) committedLog() *checker.CommittedLog {
	l := &checker.CommittedLog{Final: !s.stats.Unconverged}
	for i := uint64(1); i <= s.maxIndex; i++ {
		a, ok := s.committed[i]
		if !ok {
			l.Final = false
			continue
		}
		for _, c := range a.entry.Commands {
			l.Commands = append(l.Commands, checker.LogCommand{Index: c.Index, Op: c.Op, Key: c.Key, Tag: c.Tag, Status: c.Status, Token: c.Token})
		}
	}
	return l
}

func valueString(v history.Value) string {
	var b strings.Builder
	if v.LeaseMS != nil {
		fmt.Fprintf(&b, "lease_ms=%d ", *v.LeaseMS)
	}
	if v.WaitMS != nil {
		fmt.Fprintf(&b, "wait_ms=%d ", *v.WaitMS)
	}
	if v.Held != nil {
		fmt.Fprintf(&b, "held=%v ", *v.Held)
	}
	if v.Token != nil {
		fmt.Fprintf(&b, "token=%d ", *v.Token)
	}
	if v.Value != nil {
		fmt.Fprintf(&b, "value=%d ", *v.Value)
	}
	if v.Error != "" {
		fmt.Fprintf(&b, "error=%q ", v.Error)
	}
	if v.Nodes != nil {
		fmt.Fprintf(&b, "nodes=%v ", v.Nodes)
	}
	if v.Groups != nil {
		fmt.Fprintf(&b, "groups=%v ", v.Groups)
	}
	if v.Links != nil {
		fmt.Fprintf(&b, "links=%v ", v.Links)
	}
	if v.Node != nil {
		fmt.Fprintf(&b, "node=%d rate=%g offset_ms=%d ", *v.Node, *v.Rate, *v.OffsetMS)
	}
	return strings.TrimSpace(b.String())
}

// discard is the members' logger: their log lines are not part of a run's
// outcome, and the trace records what the driver saw.
var discard = slog.New(slog.DiscardHandler)

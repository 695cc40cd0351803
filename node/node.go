// Package node is one raftlock cluster member: the etcd-raft Ready loop,
// pebble-backed log storage, the peer transport, the lease tracker and the
// leader's lock manager, behind an in-process API (Acquire, Release, Renew,
// Get, Status) that the client server and tests call.
//
// Time, the peer network and the raft log store are reached through the
// Clock, Transport and Storage interfaces, so the same code can later run
// under a deterministic simulator.
package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/fsm"
)

// Planted bugs, for proving the chaos harness catches them. Each is only
// accepted together with fault injection (see Config.Bug).
const (
	BugExpireIgnoresToken  = "expire-ignores-token"
	BugReleaseSkipsOwner   = "release-skips-owner-check"
	BugNoTermBarrier       = "no-term-barrier"
	BugTokenAtPropose      = "token-at-propose"
	BugAckBeforeCommit     = "ack-before-commit"
	BugFollowerLocalExpire = "follower-local-expire"
	BugStaleRead           = "stale-read"
	BugEarlyExpire         = "early-expire"
	BugSkipCommitHardState = "skip-commit-hardstate"
)

// Bugs lists the planted bugs by name.
var Bugs = []string{BugExpireIgnoresToken, BugReleaseSkipsOwner, BugNoTermBarrier,
	BugTokenAtPropose, BugAckBeforeCommit, BugFollowerLocalExpire, BugStaleRead, BugEarlyExpire, BugSkipCommitHardState}

// Config configures one member.
type Config struct {
	ID         uint64
	Peers      map[uint64]string // raft peer addresses, this member included
	PeerListen string            // where to listen for peers; default Peers[ID]
	ClientAddr string            // announced to peers for redirects
	DataDir    string

	TickInterval   time.Duration // default 20ms
	ElectionTicks  int           // default 10
	HeartbeatTicks int           // default 1
	SnapshotEvery  uint64        // applied entries between snapshots; default 10000
	SnapshotKeep   uint64        // entries kept behind a snapshot for slow followers; default 1000
	MaxInflight    int           // raft MaxInflightMsgs; default 256
	MaxBatch       int           // commands per log entry; default 1024
	NoBatch        bool          // one command per entry and one entry per Ready (ablation)

	Clock     Clock     // default: system clock
	Transport Transport // default: TCP on Peers[ID]
	Storage   Storage   // default: pebble in DataDir
	Logger    *slog.Logger

	// AuditJournal, when set, is a file where every applied entry and its
	// results are appended for the chaos harness's post-run audit (see
	// CommittedLog). Only with fault injection: it grows without bound.
	AuditJournal string

	// Bug plants one named bug (see Bugs). Never set in production: the
	// CLI accepts it only with fault injection enabled.
	Bug string
}

func (c *Config) setDefaults() {
	if c.TickInterval <= 0 {
		c.TickInterval = 20 * time.Millisecond
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 1
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 10000
	}
	if c.SnapshotKeep == 0 {
		c.SnapshotKeep = 1000
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 256
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1024
	}
	if c.NoBatch {
		c.MaxBatch = 1
	}
	if c.Clock == nil {
		c.Clock = NewSystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
}

// Node is one running member.
type Node struct {
	cfg       Config
	log       *slog.Logger
	clock     Clock
	storage   Storage
	transport Transport
	rn        *raft.RawNode // owned by the raft loop
	confState *raftpb.ConfState
	metrics   *Metrics
	hooks     hooks
	journal   *journal // nil unless Config.AuditJournal

	mu      sync.Mutex // guards lm, stopped
	lm      *lockManager
	stopped bool

	propMu    sync.Mutex
	propQueue []queuedCommand
	propc     chan struct{}

	recvc   chan *raftpb.Message
	reportc chan peerReport
	readc   chan *readRequest
	applyc  chan applyTask

	statusMu sync.Mutex
	status   raftStatus

	stopc  chan struct{}
	wg     sync.WaitGroup
	errMu  sync.Mutex
	fatal  error
	closed sync.Once
}

// raftStatus is what the raft loop publishes for Status.
type raftStatus struct {
	term, lead, commit uint64
	state              raft.StateType
}

type peerReport struct {
	id       uint64
	snapshot bool
	failed   bool
}

// queuedCommand is a command waiting for the next proposal, stamped with
// the term in which the leader decided it: it may be proposed in that term
// only, since the table it was validated against may not hold in a later
// one.
type queuedCommand struct {
	env  fsm.Envelope
	term uint64
}

type readRequest struct {
	ctx   context.Context
	rctx  []byte
	until uint64        // the raft loop's tick count at which it gives up
	done  chan readDone // buffered
}

type readDone struct {
	index uint64
	err   error
}

type applyTask struct {
	snap    *raftpb.Snapshot
	entries []*raftpb.Entry
}

// New opens the member's storage and prepares it; Start runs it.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if cfg.ID == 0 {
		return nil, errors.New("member id must be > 0")
	}
	if _, ok := cfg.Peers[cfg.ID]; !ok {
		return nil, fmt.Errorf("member %d is not in the peer list", cfg.ID)
	}
	if cfg.MaxBatch > fsm.MaxBatch {
		return nil, fmt.Errorf("max batch %d exceeds the codec's limit of %d commands per entry", cfg.MaxBatch, fsm.MaxBatch)
	}
	if cfg.Bug != "" && !validBug(cfg.Bug) {
		return nil, fmt.Errorf("unknown planted bug %q", cfg.Bug)
	}
	log := cfg.Logger.With("member", cfg.ID)
	n := &Node{
		cfg: cfg, log: log, clock: cfg.Clock,
		propc: make(chan struct{}, 1), recvc: make(chan *raftpb.Message, 1024),
		reportc: make(chan peerReport, 256), readc: make(chan *readRequest, 256),
		applyc: make(chan applyTask, 256), stopc: make(chan struct{}),
		metrics: newMetrics(), hooks: plantHooks(cfg.Bug),
	}
	voters := make([]uint64, 0, len(cfg.Peers))
	for id := range cfg.Peers {
		voters = append(voters, id)
	}
	var err error
	n.storage = cfg.Storage
	if n.storage == nil {
		if cfg.DataDir == "" {
			return nil, errors.New("a data directory is required")
		}
		if n.storage, err = OpenDiskStorage(cfg.DataDir, voters, log); err != nil {
			return nil, err
		}
	}
	snap, err := n.storage.Snapshot()
	if err != nil {
		n.storage.Close()
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	machine := fsm.New()
	if len(snap.GetData()) > 0 {
		if machine, err = fsm.Restore(snap.GetData()); err != nil {
			n.storage.Close()
			return nil, fmt.Errorf("restore snapshot at %d: %w", snap.GetMetadata().GetIndex(), err)
		}
	}
	_, cs, err := n.storage.InitialState()
	if err != nil {
		n.storage.Close()
		return nil, fmt.Errorf("read initial state: %w", err)
	}
	n.confState = cs
	n.lm = newLockManager(uint64(time.Now().UnixNano()))
	n.restoreLocked(machine, snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm())

	rcfg := &raft.Config{
		ID: cfg.ID, ElectionTick: cfg.ElectionTicks, HeartbeatTick: cfg.HeartbeatTicks,
		Storage: n.storage, Applied: snap.GetMetadata().GetIndex(),
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: cfg.MaxInflight,
		MaxUncommittedEntriesSize: 64 << 20, MaxCommittedSizePerReady: 4 << 20,
		CheckQuorum: true, PreVote: true, ReadOnlyOption: raft.ReadOnlySafe,
		DisableProposalForwarding: true, Logger: raftLogger{log.With("component", "raft")},
	}
	if n.rn, err = raft.NewRawNode(rcfg); err != nil {
		n.storage.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	if cfg.AuditJournal != "" {
		if n.journal, err = openJournal(cfg.AuditJournal); err != nil {
			n.storage.Close()
			return nil, err
		}
	}
	n.transport = cfg.Transport
	if n.transport == nil {
		if n.transport, err = NewTCPTransport(cfg.ID, cfg.Peers, cfg.PeerListen, cfg.ClientAddr, log); err != nil {
			n.storage.Close()
			return nil, err
		}
	}
	return n, nil
}

func validBug(b string) bool {
	for _, x := range Bugs {
		if x == b {
			return true
		}
	}
	return false
}

// Start begins serving peers and running raft.
func (n *Node) Start() error {
	if err := n.transport.Start(n); err != nil {
		n.storage.Close()
		return err
	}
	n.noteFirstIndex()
	n.wg.Add(3)
	go n.raftLoop()
	go n.applyLoop()
	go n.timerLoop()
	return nil
}

// Close stops the member at once, as a crash would between two fsyncs:
// nothing acknowledged is lost because nothing is acknowledged before it
// is durable.
func (n *Node) Close() error {
	n.closed.Do(func() {
		n.mu.Lock()
		n.stopped = true
		for _, req := range n.lm.pending {
			n.deliverLocked(req, fsm.Result{}, ErrOutcomeUnknown)
		}
		for _, q := range n.lm.waiters {
			for _, w := range q {
				n.deliverLocked(w, fsm.Result{}, ErrUnavailable)
			}
		}
		n.mu.Unlock()
		close(n.stopc)
		n.transport.Close()
		n.wg.Wait()
		n.storage.Close()
		if n.journal != nil {
			n.journal.close()
		}
	})
	return n.Err()
}

// Err returns the error that stopped the node, if any.
func (n *Node) Err() error {
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return n.fatal
}

func (n *Node) fail(err error) {
	n.errMu.Lock()
	if n.fatal == nil {
		n.fatal = err
	}
	n.errMu.Unlock()
	n.log.Error("node stopping", "err", err)
	go n.Close()
}

// Receive implements PeerHandler.
func (n *Node) Receive(m *raftpb.Message) {
	if !peerMessageAllowed(m.GetType()) {
		n.log.Warn("dropped raft message of a type peers never send", "type", m.GetType().String(), "from", m.GetFrom())
		return
	}
	select {
	case n.recvc <- m:
	case <-n.stopc:
	}
}

// peerMessageAllowed filters out local-only message types, which raft would
// act on as if this node had generated them.
func peerMessageAllowed(t raftpb.MessageType) bool {
	switch t {
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgAppResp,
		raftpb.MessageType_MsgVote, raftpb.MessageType_MsgVoteResp,
		raftpb.MessageType_MsgPreVote, raftpb.MessageType_MsgPreVoteResp,
		raftpb.MessageType_MsgSnap, raftpb.MessageType_MsgHeartbeat,
		raftpb.MessageType_MsgHeartbeatResp, raftpb.MessageType_MsgReadIndex,
		raftpb.MessageType_MsgReadIndexResp, raftpb.MessageType_MsgTimeoutNow,
		raftpb.MessageType_MsgTransferLeader:
		return true
	}
	return false
}

// ReportUnreachable implements PeerHandler.
func (n *Node) ReportUnreachable(id uint64) {
	select {
	case n.reportc <- peerReport{id: id}:
	default:
	}
}

// ReportSnapshot implements PeerHandler. It never blocks its caller, which
// may be the raft loop itself (Send with a full peer queue), the only
// reader of reportc; and it never drops the report, without which raft
// would leave the follower waiting for a snapshot forever.
func (n *Node) ReportSnapshot(id uint64, failed bool) {
	r := peerReport{id: id, snapshot: true, failed: failed}
	select {
	case n.reportc <- r:
	default:
		go func() {
			select {
			case n.reportc <- r:
			case <-n.stopc:
			}
		}()
	}
}

// enqueueLocked queues env for the next proposal, decided in the current
// term.
func (n *Node) enqueueLocked(env fsm.Envelope) { n.enqueueInTerm(env, n.lm.term) }

func (n *Node) enqueueInTerm(env fsm.Envelope, term uint64) {
	n.propMu.Lock()
	n.propQueue = append(n.propQueue, queuedCommand{env: env, term: term})
	n.propMu.Unlock()
	select {
	case n.propc <- struct{}{}:
	default:
	}
}

// raftLoop owns the RawNode: ticks, peer messages, proposals and reads go
// in; each Ready is persisted in one batch and handed to the apply loop.
func (n *Node) raftLoop() {
	defer n.wg.Done()
	ticker := n.clock.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	reads := make(map[string]*readRequest)
	var readSeq, ticks uint64
	// raft drops a ReadIndex silently when leadership changes hands or
	// there is no leader: a read still unanswered after a few election
	// timeouts gets the retryable Unavailable instead of waiting forever.
	readTimeout := uint64(3 * n.cfg.ElectionTicks)
	isLeader := false
	for {
		select {
		case <-n.stopc:
			return
		case <-ticker.C():
			n.rn.Tick()
			ticks++
			for k, r := range reads {
				if r.ctx.Err() != nil || ticks >= r.until {
					r.done <- readDone{err: ErrUnavailable}
					delete(reads, k)
				}
			}
		case m := <-n.recvc:
			n.rn.Step(m)
		drain:
			for range 256 {
				select {
				case m := <-n.recvc:
					n.rn.Step(m)
				default:
					break drain
				}
			}
		case r := <-n.reportc:
			if r.snapshot {
				st := raft.SnapshotFinish
				if r.failed {
					st = raft.SnapshotFailure
				}
				n.rn.ReportSnapshot(r.id, st)
			} else {
				n.rn.ReportUnreachable(r.id)
			}
		case r := <-n.readc:
			if !isLeader {
				// Stepped down since the caller checked: raft would forward
				// the ReadIndex to a leader this member may not reach.
				r.done <- readDone{err: ErrUnavailable}
				break
			}
			readSeq++
			r.rctx = binary.BigEndian.AppendUint64(nil, readSeq)
			r.until = ticks + readTimeout
			reads[string(r.rctx)] = r
			n.rn.ReadIndex(r.rctx)
		case <-n.propc:
			n.proposeQueued()
		}
		for n.rn.HasReady() {
			if err := n.handleReady(&isLeader, reads); err != nil {
				if !errors.Is(err, errStopping) {
					n.fail(err)
				}
				// The Ready was taken but not advanced: raft panics if
				// asked for another, so the loop ends here.
				return
			}
			if n.cfg.NoBatch {
				break
			}
		}
		if n.cfg.NoBatch {
			// Ablation: take new proposals only once the last Ready is done.
			n.propMu.Lock()
			queued := len(n.propQueue) > 0
			n.propMu.Unlock()
			if queued {
				select {
				case n.propc <- struct{}{}:
				default:
				}
			}
		}
	}
}

// proposeQueued turns the proposal queue into as few entries as fit the
// batch limit: whatever arrived while the last Ready was being persisted
// rides in one entry.
func (n *Node) proposeQueued() {
	n.propMu.Lock()
	queued := n.propQueue
	n.propQueue = nil
	if n.cfg.NoBatch && len(queued) > 1 {
		n.propQueue, queued = queued[1:], queued[:1]
	}
	n.propMu.Unlock()
	bs := n.rn.BasicStatus()
	q := make([]fsm.Envelope, 0, len(queued))
	var stale []queuedCommand
	for _, c := range queued {
		if bs.RaftState == raft.StateLeader && c.term == bs.GetTerm() {
			q = append(q, c.env)
		} else {
			stale = append(stale, c)
		}
	}
	if len(stale) > 0 {
		n.mu.Lock()
		for _, c := range stale {
			if c.term == n.lm.term {
				// Still the lock manager's term (raft stepped down and the
				// Ready that says so is next): undo its bookkeeping.
				n.dropLocked([]fsm.Envelope{c.env})
			} else if req, ok := n.lm.pending[c.env.ID]; ok {
				// An older term: becomeLocked already reset the bookkeeping,
				// which now belongs to this term's commands; only answer.
				delete(n.lm.pending, c.env.ID)
				n.deliverLocked(req, fsm.Result{}, ErrUnavailable)
			}
		}
		n.mu.Unlock()
	}
	for len(q) > 0 {
		k := min(len(q), n.cfg.MaxBatch)
		batch := q[:k]
		q = q[k:]
		data := fsm.EncodeBatch(batch)
		n.metrics.proposals.Inc()
		n.metrics.batchSize.Observe(float64(len(batch)))
		if err := n.rn.Propose(data); err != nil {
			n.mu.Lock()
			n.dropLocked(batch)
			n.mu.Unlock()
		}
	}
}

func (n *Node) handleReady(isLeader *bool, reads map[string]*readRequest) error {
	rd := n.rn.Ready()
	// Role, leader and term change only with a SoftState or a new term; a
	// commit-only hard state (most Readies) needs no status work and no
	// n.mu, which the apply loop holds.
	n.statusMu.Lock()
	termChanged := rd.HardState != nil && rd.HardState.GetTerm() != n.status.term
	n.statusMu.Unlock()
	if rd.SoftState != nil || termChanged {
		bs := n.rn.BasicStatus()
		st := raftStatus{term: bs.GetTerm(), lead: bs.Lead, commit: bs.GetCommit(), state: bs.RaftState}
		n.statusMu.Lock()
		prevLead := n.status.lead
		n.status = st
		n.statusMu.Unlock()
		if st.lead != prevLead {
			n.metrics.leaderChanges.Inc()
			n.log.Info("leader changed", "leader", st.lead, "previous", prevLead, "term", st.term, "role", roleName(st.state))
		} else if rd.SoftState != nil {
			n.log.Info("role changed", "role", roleName(st.state), "term", st.term, "leader", st.lead)
		}
		*isLeader = st.state == raft.StateLeader
		if !*isLeader {
			for k, r := range reads {
				r.done <- readDone{err: ErrUnavailable}
				delete(reads, k)
			}
		}
		n.mu.Lock()
		n.becomeLocked(*isLeader, st.term, st.lead)
		n.mu.Unlock()
		n.metrics.isLeader.Set(b2f(*isLeader))
		n.metrics.hasLeader.Set(b2f(st.lead != 0))
		n.metrics.term.Set(float64(st.term))
	}
	// The leader sends its appends before its own fsync (raft thesis
	// 10.2.1); it counts itself toward the commit quorum only after Advance.
	if *isLeader {
		n.transport.Send(rd.Messages)
	}
	// Every hard state raft hands over is written, commit-only changes
	// included: Compact stores a snapshot at the applied index, and raft
	// refuses to start from a stored commit below the stored snapshot. A
	// commit-only change need not be synced (the WAL is ordered, so it can
	// never be newer on disk than the entries it counts). A snapshot is
	// always synced, although MustSync ignores it: the follower acknowledges
	// it, and one that lost it after a crash would be asked to commit
	// entries it no longer has.
	hasSnap := !raft.IsEmptySnap(rd.Snapshot)
	sync := rd.MustSync || hasSnap
	hs := n.hooks.hardStateToSave(&rd)
	if len(rd.Entries) > 0 || hs != nil || hasSnap {
		start := time.Now()
		if err := n.storage.Save(hs, rd.Entries, rd.Snapshot, sync); err != nil {
			return fmt.Errorf("persist ready: %w", err)
		}
		if sync {
			n.metrics.fsyncs.Inc()
			n.metrics.fsyncSeconds.Observe(time.Since(start).Seconds())
		}
		n.metrics.entriesPersisted.Add(float64(len(rd.Entries)))
	}
	if hasSnap && !n.handOff(applyTask{snap: rd.Snapshot}) {
		return errStopping
	}
	// Followers answer (MsgAppResp, votes) only once their write is durable.
	if !*isLeader {
		n.transport.Send(rd.Messages)
	}
	if len(rd.CommittedEntries) > 0 {
		if !n.handOff(applyTask{entries: rd.CommittedEntries}) {
			return errStopping
		}
		last := rd.CommittedEntries[len(rd.CommittedEntries)-1]
		n.statusMu.Lock()
		n.status.commit = max(n.status.commit, last.GetIndex())
		n.statusMu.Unlock()
	}
	if rd.HardState != nil {
		n.statusMu.Lock()
		n.status.commit = max(n.status.commit, rd.HardState.GetCommit())
		n.statusMu.Unlock()
	}
	for _, rs := range rd.ReadStates {
		if r, ok := reads[string(rs.RequestCtx)]; ok {
			delete(reads, string(rs.RequestCtx))
			r.done <- readDone{index: rs.Index}
		}
	}
	n.rn.Advance(rd)
	return nil
}

// errStopping ends the raft loop mid-Ready: the node is closing and the
// apply loop may no longer take work.
var errStopping = errors.New("node stopping")

// handOff gives t to the apply loop; false when the node is stopping (the
// apply loop may be gone, and nothing else drains applyc).
func (n *Node) handOff(t applyTask) bool {
	select {
	case n.applyc <- t:
		return true
	case <-n.stopc:
		return false
	}
}

// applyLoop applies committed entries in order, off the raft loop, so a slow
// apply never delays persisting or sending the next Ready.
func (n *Node) applyLoop() {
	defer n.wg.Done()
	lastSnap := n.appliedIndex()
	for {
		var t applyTask
		select {
		case <-n.stopc:
			return
		case t = <-n.applyc:
		}
		if t.snap != nil {
			m, err := fsm.Restore(t.snap.GetData())
			if err != nil {
				n.fail(fmt.Errorf("install snapshot at %d: %w", t.snap.GetMetadata().GetIndex(), err))
				return
			}
			n.mu.Lock()
			n.restoreLocked(m, t.snap.GetMetadata().GetIndex(), t.snap.GetMetadata().GetTerm())
			n.signalAppliedLocked()
			n.mu.Unlock()
			lastSnap = t.snap.GetMetadata().GetIndex()
			n.metrics.snapshotsInstalled.Inc()
			n.noteFirstIndex()
			n.log.Info("installed snapshot", "index", lastSnap)
			continue
		}
		n.mu.Lock()
		for _, e := range t.entries {
			if e.GetIndex() <= n.lm.applied {
				continue
			}
			if e.GetType() == raftpb.EntryType_EntryNormal && len(e.GetData()) > 0 {
				envs, err := fsm.DecodeBatch(e.GetData())
				if err != nil {
					// Identical bytes on every node: skipping is deterministic.
					n.log.Error("skipping undecodable entry", "index", e.GetIndex(), "err", err)
				}
				var logged []LoggedCommand
				for _, env := range envs {
					res := n.applyLocked(env, e.GetTerm())
					if n.journal != nil {
						logged = append(logged, loggedCommand(e, env, res))
					}
				}
				if n.journal != nil {
					n.journal.add(journalEntry{Index: e.GetIndex(), Term: e.GetTerm(), Commands: logged})
				}
			} else if n.journal != nil {
				n.journal.add(journalEntry{Index: e.GetIndex(), Term: e.GetTerm()})
			}
			n.lm.applied, n.lm.appliedTerm = e.GetIndex(), e.GetTerm()
			if n.lm.leader && e.GetTerm() == n.lm.term && !n.lm.barrier {
				n.lm.barrier = true
				n.log.Info("leader ready: applied the first entry of its term", "term", n.lm.term, "index", e.GetIndex())
			}
			n.metrics.entriesApplied.Inc()
		}
		applied := n.lm.applied
		n.metrics.locksHeld.Set(float64(n.lm.machine.Len()))
		n.statusMu.Lock()
		commit := n.status.commit
		n.statusMu.Unlock()
		n.metrics.commit.Set(float64(commit))
		n.metrics.applyLag.Set(float64(commit - min(commit, applied)))
		n.signalAppliedLocked()
		var data []byte
		if applied-lastSnap >= n.cfg.SnapshotEvery {
			data = n.lm.machine.Snapshot()
		}
		n.mu.Unlock()
		// Journal before any snapshot that covers these entries, so a
		// restart replays whatever the journal misses; a failed write skips
		// the snapshot, which would make the gap permanent.
		if n.journal != nil {
			if err := n.journal.flush(); err != nil {
				n.log.Error("audit journal write failed; snapshot postponed", "err", err)
				data = nil
			}
		}
		if data != nil {
			compactTo := uint64(1)
			if applied > n.cfg.SnapshotKeep {
				compactTo = applied - n.cfg.SnapshotKeep
			}
			if err := n.storage.Compact(applied, n.confState, data, compactTo); err != nil {
				n.fail(err)
				return
			}
			lastSnap = applied
			n.metrics.snapshots.Inc()
			n.noteFirstIndex()
		}
	}
}

// noteFirstIndex publishes the first stored log index: the harness watches
// it to know when a lagging follower can only catch up by snapshot.
func (n *Node) noteFirstIndex() {
	if i, err := n.storage.FirstIndex(); err == nil {
		n.metrics.firstIndex.Set(float64(i))
	}
}

func (n *Node) signalAppliedLocked() {
	n.lm.appliedAt = n.clock.Now()
	close(n.lm.appliedCh)
	n.lm.appliedCh = make(chan struct{})
	n.metrics.applied.Set(float64(n.lm.applied))
}

func (n *Node) appliedIndex() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lm.applied
}

// timerLoop drives lease expiry and waiter deadlines from the node's clock.
func (n *Node) timerLoop() {
	defer n.wg.Done()
	ticker := n.clock.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-n.stopc:
			return
		case <-ticker.C():
			n.mu.Lock()
			n.tickLocked()
			waiting := 0
			for _, q := range n.lm.waiters {
				waiting += len(q)
			}
			n.mu.Unlock()
			n.metrics.waiters.Set(float64(waiting))
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Package member is one raftlock cluster member as a synchronous state
// machine: etcd-raft's RawNode, the replicated lock table (fsm) and the
// leader's lock manager, with no goroutines, clock, network or disk of its
// own. Ticks, peer messages and client requests go in; a Ready says what to
// persist, what to send and which requests to answer (the RawNode/Ready
// style of etcd-raft). The production driver (package node: goroutines,
// the system clock, TCP, pebble) and the deterministic simulator
// (chaos/sim) both drive it; neither has lock logic of its own.
//
// A Core is not safe for concurrent use.
package member

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/memberstatus"
)

// Config configures one member core.
type Config struct {
	ID uint64
	// Storage is the raft log as persisted so far. The driver writes it
	// (Ready, Compaction); the core and raft only read it.
	Storage        raft.Storage
	ElectionTicks  int    // default DefaultElectionTicks
	HeartbeatTicks int    // default DefaultHeartbeatTicks
	SnapshotEvery  uint64 // applied entries between snapshots; default DefaultSnapshotEvery
	// SnapshotByEntries takes a snapshot every SnapshotEvery entries
	// whatever the table's size; by default a snapshot also waits until
	// the log since the last one is as big as the table (snapshotDue).
	// For harnesses that want big snapshots often.
	SnapshotByEntries bool
	SnapshotKeep      uint64 // entries kept behind a snapshot for slow followers; default DefaultSnapshotKeep
	MaxInflight       int    // raft MaxInflightMsgs; default DefaultMaxInflight
	MaxBatch          int    // commands per log entry; default DefaultMaxBatch
	// MaxUncommitted is how many entries a leader keeps proposed and not
	// yet committed; commands decided meanwhile wait and share the next
	// entry. Default 2; negative: no limit.
	MaxUncommitted int
	// MaxAppendBytes bounds the entries of one append message (raft's
	// MaxSizePerMsg; one entry larger than it still goes alone); default
	// 1 MiB. The driver keeps it under its transport's frame limit.
	MaxAppendBytes uint64
	NoBatch        bool // one command per entry and one entry per Ready (ablation)
	// NoHandoff: a freed key's next waiter is granted only once the
	// Release or Expire that frees it applied, not in its entry (ablation).
	NoHandoff bool
	// Bug plants one named bug (see Bugs); "" plants none.
	Bug string
	// Journal: Ready.Applied carries every applied entry with its results,
	// for a post-run audit.
	Journal bool
	Logger  *slog.Logger
	Metrics Meter // nil: a private Tally
	// SeqStart is where request sequence numbers start; a restarted member
	// must never reuse an id its previous incarnation proposed.
	SeqStart uint64
	// Limits bound the calls, waiters and keys the member holds.
	Limits Limits
	// DeltaSnapshots: the driver's store keeps a snapshot as a chain of a
	// base and deltas (Compaction.Changes), so a snapshot is due every
	// SnapshotEvery entries whatever the table's size: it costs what
	// changed, and the store writes the whole table only once the deltas
	// add up to more than it.
	DeltaSnapshots bool
	// Peers are the members' peer addresses the driver was started with:
	// the address book of a store whose snapshot carries none (a fresh
	// bootstrap, or data from before the book).
	Peers map[uint64]string
}

// Defaults of the tuning fields (Config.SetDefaults).
const (
	DefaultElectionTicks  = 10
	DefaultHeartbeatTicks = 1
	DefaultSnapshotEvery  = 10000
	DefaultSnapshotKeep   = 1000
	DefaultMaxInflight    = 256
	DefaultMaxBatch       = 1024
	DefaultMaxAppendBytes = 1 << 20
)

// SetDefaults fills the tuning fields left zero with their defaults: the
// one place they are set, for the core, the production driver and the
// flags of `raftlock node` alike.
func (c *Config) SetDefaults() {
	positiveOr(&c.ElectionTicks, DefaultElectionTicks)
	positiveOr(&c.HeartbeatTicks, DefaultHeartbeatTicks)
	nonZeroOr(&c.SnapshotEvery, DefaultSnapshotEvery)
	nonZeroOr(&c.SnapshotKeep, DefaultSnapshotKeep)
	positiveOr(&c.MaxInflight, DefaultMaxInflight)
	positiveOr(&c.MaxBatch, DefaultMaxBatch)
	nonZeroOr(&c.MaxUncommitted, DefaultMaxUncommitted) // negative: no limit
	nonZeroOr(&c.MaxAppendBytes, DefaultMaxAppendBytes)
	if c.NoBatch {
		c.MaxBatch = 1
	}
}

// positiveOr sets *v to d unless it is above zero: a count for which zero
// and below mean nothing.
func positiveOr(v *int, d int) {
	if *v <= 0 {
		*v = d
	}
}

// nonZeroOr sets *v to d when it is zero (not given).
func nonZeroOr[T int | uint64](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

// setDefaults is SetDefaults, and a silent logger and private metrics
// where none was given.
func (c *Config) setDefaults() {
	c.SetDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = &Tally{}
	}
}

// SnapshotReader is a raft.Storage whose snapshots may carry, in place of
// their data, a reference to where it is kept (so that a table of
// hundreds of megabytes is not held in memory for raft to send): the
// core reads the data through it when it starts.
type SnapshotReader interface {
	SnapshotData(stored []byte) ([]byte, error)
}

// Ready is what the driver must do, in this order: record Applied (the
// audit journal), store Compaction, send SendBeforePersist, save HardState,
// Entries and Snapshot (synced when Sync), send Messages, deliver Answers,
// then call Advance.
type Ready struct {
	HardState *raftpb.HardState // nil: unchanged
	Entries   []*raftpb.Entry
	Snapshot  *raftpb.Snapshot // nil: none
	Sync      bool
	// SendBeforePersist are a leader's appends: it sends them before its
	// own fsync (raft thesis 10.2.1) and counts itself toward the commit
	// quorum only after Advance.
	SendBeforePersist []*raftpb.Message
	// Messages go out only once the write is durable: a follower's
	// acknowledgements and votes promise what it stored.
	Messages []*raftpb.Message
	Answers  []Answer
	Applied  []AppliedEntry
	// Events are the lock events of the entries applied since the last
	// Ready, in log order, while the core is watching (SetWatching).
	Events     []Event
	Compaction *Compaction
}

// AppliedEntry is one applied log entry with the results of its commands.
type AppliedEntry struct {
	Index    uint64          `json:"index"`
	Term     uint64          `json:"term"`
	Commands []LoggedCommand `json:"commands,omitempty"`
}

// Compaction asks the driver to store a snapshot of the table at Index (which
// is applied) and drop the log before CompactTo. The table is a frozen
// copy: Data encodes it, which costs time in the size of the table, so a
// driver calls it off the goroutine that drives the core (the core goes on
// applying meanwhile) and may store the compaction whenever it is done,
// dropping one that a later compaction overtook (after Absorb).
//
// Changes are the keys the table changed since the snapshot at Base (the
// core's last, stored or not): a store whose snapshot ends at Base may
// store the delta (WriteDeltaTo) in place of the table, as long as its
// deltas since the last whole table stay under MaxDeltaBytes and its
// chain under MaxParts parts. Those bounds differ by member id, so the
// members' whole-table writes, which would otherwise come at the same
// index, do not come at once.
type Compaction struct {
	Index     uint64
	ConfState *raftpb.ConfState
	Table     *fsm.Frozen
	Book      Book
	CompactTo uint64

	Changes       *fsm.Changes
	Base          uint64
	MaxDeltaBytes uint64
	MaxParts      int
}

// Data encodes the snapshot's data (EncodeSnapshot). Safe to call from
// any goroutine.
func (c *Compaction) Data() []byte {
	var b bytes.Buffer
	c.WriteTo(&b, nil) // a bytes.Buffer does not fail
	return b.Bytes()
}

// WriteTo streams the bytes Data returns to w, without holding them,
// calling yield (when not nil) often so that the goroutine writing a big
// table lets the member's own run.
func (c *Compaction) WriteTo(w io.Writer, yield func()) error {
	return WriteSnapshot(w, c.Table, c.Book, yield)
}

// WriteDeltaTo streams the delta segment from the snapshot at Base to
// this one (WriteSnapshotDelta), calling yield as WriteTo does.
func (c *Compaction) WriteDeltaTo(w io.Writer, yield func()) error {
	return WriteSnapshotDelta(w, c.Table, c.Changes, c.Book, yield)
}

// Absorb makes c, which came after earlier, carry earlier's changes too:
// for a driver that drops earlier unstored, c's delta then starts where
// earlier's did.
func (c *Compaction) Absorb(earlier *Compaction) {
	if c.Changes == nil || earlier.Changes == nil {
		c.Changes = nil // nothing to start a delta from: the whole table
		return
	}
	c.Changes.Absorb(earlier.Changes)
	c.Base = earlier.Base
	if c.Changes.EncodedSize() >= c.Table.EncodedSize() {
		// A delta as big as the table costs what the table does, and
		// its keys are held twice meanwhile: write the table.
		c.Changes = nil
	}
}

// Status describes a member: the shape the client protocol
// (wire.Status) and the HTTP /status endpoint carry, defined once below
// both.
type Status = memberstatus.Status

// Core is one member. See the package comment.
type Core struct {
	cfg     Config
	log     *slog.Logger
	hooks   hooks
	metrics Meter
	rn      *raft.RawNode
	lm      *LockManager
	cs      *raftpb.ConfState
	book    Book // the replicated address book (book.go)

	pending     *pendingChange // the membership change this leader proposed (membership.go)
	removed     bool           // this member applied its own removal
	snapshotNow bool           // snapshot after this apply, whatever SnapshotEvery says
	draining    bool           // handing over: no new calls (drain.go)
	bookVersion uint64

	queue []Proposal // decided, not yet proposed
	reads []*pendingRead
	rseq  uint64
	ticks uint64

	rd       *raft.Ready // taken from raft, not yet advanced
	appliedR bool        // rd's committed entries were applied already

	role       raft.StateType
	term, lead uint64
	commit     uint64
	last       uint64 // raft's last log index, as of the last Ready
	lastSnap   uint64
	logBytes   uint64 // bytes of the entries applied since lastSnap
	appliedAt  uint64 // tick count when applied last moved
	// staggered: this member's first snapshot of a big table waited its
	// share of the table's log (snapshotDue), setting its phase apart
	// from the other members'.
	staggered bool

	answers    []Answer
	applied    []AppliedEntry
	compaction *Compaction
	stopped    bool
	// watching: the driver wants lock events (events.go), which wait in
	// events for the next Ready.
	watching bool
	events   []Event

	// checked is the last snapshot Step decoded to check it, kept so the
	// apply that installs the same snapshot does not decode it again (a
	// million locks take about a second to decode). It lives until the
	// next Ready: raft installs a snapshot it took in the Ready after.
	checked *decodedSnapshot
}

type decodedSnapshot struct {
	index, term uint64
	data        []byte
	m           *fsm.Machine
	book        Book
	hasBook     bool
}

// decodeSnapshot decodes snap's data, reusing what Step decoded of the
// same snapshot. raft hands back a copy of the bytes it was given, so they
// are compared (a few milliseconds for hundreds of megabytes, against the
// second a decode takes).
func (c *Core) decodeSnapshot(snap *raftpb.Snapshot) (*fsm.Machine, Book, bool, error) {
	d := c.checked
	c.checked = nil
	md := snap.GetMetadata()
	if d != nil && d.index == md.GetIndex() && d.term == md.GetTerm() && bytes.Equal(d.data, snap.GetData()) {
		return d.m, d.book, d.hasBook, nil
	}
	return DecodeSnapshot(snap.GetData())
}

type pendingRead struct {
	handle uint64
	rctx   string
	until  uint64 // tick count at which the read gives up
	index  uint64
	known  bool // raft answered with index
}

// New starts a member from what cfg.Storage holds. It panics, as raft does,
// on a store raft cannot start from.
func New(cfg Config, now time.Duration) (*Core, error) {
	cfg.setDefaults()
	if cfg.ID == 0 {
		return nil, errors.New("member id must be > 0")
	}
	if cfg.Storage == nil {
		return nil, errors.New("a log store is required")
	}
	if cfg.MaxBatch > fsm.MaxBatch {
		return nil, fmt.Errorf("max batch %d exceeds the codec's limit of %d commands per entry", cfg.MaxBatch, fsm.MaxBatch)
	}
	if !ValidBug(cfg.Bug) {
		return nil, fmt.Errorf("unknown planted bug %q", cfg.Bug)
	}
	snap, err := cfg.Storage.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	data := snap.GetData()
	if r, ok := cfg.Storage.(SnapshotReader); ok {
		if data, err = r.SnapshotData(data); err != nil {
			return nil, fmt.Errorf("read snapshot at %d: %w", snap.GetMetadata().GetIndex(), err)
		}
	}
	machine, book, hasBook, err := DecodeSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("restore snapshot at %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	if !hasBook {
		// A store from before the address book: its members are the
		// ones the driver was started with.
		book = NewBook(cfg.Peers)
	}
	_, cs, err := cfg.Storage.InitialState()
	if err != nil {
		return nil, fmt.Errorf("read initial state: %w", err)
	}
	c := &Core{cfg: cfg, log: cfg.Logger, hooks: plantHooks(cfg.Bug), metrics: cfg.Metrics, cs: cs, book: book}
	if len(cs.GetVoters()) > 0 && !c.inConfig(cfg.ID) && slices.Contains(book.Removed, cfg.ID) {
		// Its own snapshot covers its removal: no entry is left to apply
		// that would tell it, so it starts removed and its driver stops it
		// as if it had just applied the removal. (A joiner is outside its
		// bootstrap configuration too, but it was never removed.)
		c.removed = true
		c.log.Warn("this member's snapshot covers its removal from the configuration", "index", snap.GetMetadata().GetIndex())
	}
	c.lm = NewLockManager(cfg.ID, cfg.Bug, cfg.SeqStart)
	c.lm.SetHandoff(!cfg.NoHandoff)
	c.lm.SetLimits(cfg.Limits)
	c.lm.Restore(machine, snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm(), now)
	c.lastSnap = snap.GetMetadata().GetIndex()
	rcfg := &raft.Config{
		ID: cfg.ID, ElectionTick: cfg.ElectionTicks, HeartbeatTick: cfg.HeartbeatTicks,
		Storage: cfg.Storage, Applied: snap.GetMetadata().GetIndex(),
		MaxSizePerMsg: cfg.MaxAppendBytes, MaxInflightMsgs: cfg.MaxInflight,
		MaxUncommittedEntriesSize: 64 << 20, MaxCommittedSizePerReady: 4 << 20,
		CheckQuorum: true, PreVote: true, ReadOnlyOption: raft.ReadOnlySafe,
		DisableProposalForwarding: true, Logger: RaftLogger{cfg.Logger.With("component", "raft")},
	}
	if c.rn, err = raft.NewRawNode(rcfg); err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}
	return c, nil
}

// Tick advances raft by one tick and runs the lock timers at local time now.
func (c *Core) Tick(now time.Duration) {
	if c.stopped {
		return
	}
	c.rn.Tick()
	c.ticks++
	// raft drops a ReadIndex silently when leadership changes hands or
	// there is no leader: a read unanswered after a few election timeouts
	// gets the retryable Unavailable instead of waiting forever.
	c.endReads(now, func(r *pendingRead) bool { return c.ticks >= r.until }, ErrUnavailable)
	if p := c.pending; p != nil && c.ticks >= p.until {
		c.pending = nil
		c.answers = append(c.answers, Answer{Handle: p.handle, Err: ErrOutcomeUnknown})
	}
	c.lm.Tick(now)
	c.collect(now)
	c.metrics.Set(Waiters, float64(c.lm.Waiting()))
}

// Step hands raft a message from a peer. Message types that only a member
// generates for itself are refused: raft would act on them as its own.
func (c *Core) Step(m *raftpb.Message) error {
	if !peerMessageAllowed(m.GetType()) {
		return fmt.Errorf("refused raft message of type %s from %d: peers never send it", m.GetType(), m.GetFrom())
	}
	if c.stopped {
		return ErrStopped
	}
	// raft trusts its peers: it takes a message from 0 for its own, and
	// reads a read-index request's context from Entries[0]. A malformed
	// frame must not stop the member (found by FuzzStep).
	if from := m.GetFrom(); from == 0 || from == c.cfg.ID || !c.mayStep(from, m.GetType()) {
		return fmt.Errorf("refused raft message of type %s from %d: not a peer", m.GetType(), from)
	}
	if m.GetTo() != c.cfg.ID {
		return fmt.Errorf("refused raft message of type %s for %d: this is member %d", m.GetType(), m.GetTo(), c.cfg.ID)
	}
	if m.GetType() == raftpb.MessageType_MsgReadIndex && len(m.GetEntries()) != 1 {
		return fmt.Errorf("refused read-index request from %d with %d context entries", m.GetFrom(), len(m.GetEntries()))
	}
	if c.hooks.peerInputChecks && m.GetType() == raftpb.MessageType_MsgSnap && jointConf(m.GetSnapshot().GetMetadata().GetConfState()) {
		return fmt.Errorf("refused snapshot from %d with a joint configuration: this cluster makes single changes only", m.GetFrom())
	}
	if c.hooks.peerInputChecks && m.GetType() == raftpb.MessageType_MsgApp {
		if err := checkAppend(m); err != nil {
			return fmt.Errorf("refused append from %d: %w", m.GetFrom(), err)
		}
	}
	if c.hooks.peerInputChecks && m.GetType() == raftpb.MessageType_MsgSnap {
		d, err := checkSnapshot(m.GetSnapshot())
		if errors.Is(err, fsm.ErrCorrupt) {
			c.metrics.Add(SnapshotsCorrupt, 1)
		}
		if err != nil {
			return fmt.Errorf("refused snapshot from %d at %d: %w", m.GetFrom(), m.GetSnapshot().GetMetadata().GetIndex(), err)
		}
		c.checked = d
	}
	if m.GetType() == raftpb.MessageType_MsgSnap && !confHas(m.GetSnapshot().GetMetadata().GetConfState(), c.cfg.ID) {
		// raft drops it (it cannot restore a configuration without
		// itself) and the leader sends it again: counted, because a new
		// member stuck here never catches up.
		c.metrics.Add(SnapshotsRefused, 1)
		c.log.Warn("snapshot from the leader does not name this member; raft refuses it", "from", m.GetFrom(),
			"index", m.GetSnapshot().GetMetadata().GetIndex())
	}
	if m.GetType() == raftpb.MessageType_MsgHeartbeat {
		// A leader's heartbeat carries min(commit, what this member
		// acknowledged), and a member acknowledges only what it stored:
		// a commit index past the stored log is forged, or this member
		// lost entries it acknowledged. raft would panic; the frame is
		// refused and the driver decides (ErrCommitBeyondLog).
		last, err := c.cfg.Storage.LastIndex()
		if err == nil && m.GetCommit() > last {
			return fmt.Errorf("%w: heartbeat from %d commits %d, log ends at %d", ErrCommitBeyondLog, m.GetFrom(), m.GetCommit(), last)
		}
	}
	return c.rn.Step(m)
}

// mayStep says whether id may send this member a raft message of type t.
//
// A removed id never may: ids are never reused, so it is a member that
// left for good (whatever --peers says), and its messages could only
// disturb the terms of the members that remain.
//
// A member of the configuration, of the address book, or one the driver
// was started with may send anything a peer sends (a joining member hears
// from the current leader before it has replayed the change that added
// that leader).
//
// Any other id may send what only a leader or a candidate sends: appends,
// heartbeats, snapshots, TimeoutNow and (pre-)vote requests. Such a sender
// is a member added by entries this member has not applied yet, typically
// while it was down: if that member now leads, refusing it would leave
// this member behind for as long as it leads, since the log that names it
// can only come from it. Taking its messages is safe because raft's
// safety never rests on the receiver knowing the sender: a leader's
// appends are only ever accepted when they match this member's log (the
// log-matching check does not depend on the configuration), and entries
// commit only with acknowledgements counted by the leader against its own
// configuration, where this member is what the log made it. A vote this
// member grants counts only in the candidate's tally and is granted at
// most once per term, with PreVote and CheckQuorum keeping an outsider
// from deposing a leader this member hears from. Responses, read-index
// and transfer requests are refused: they answer requests this member
// sent, or come from its followers, and it sends to no member it does not
// know. Who may connect at all is the transport's call (cluster id,
// incarnation, certificate).
func (c *Core) mayStep(id uint64, t raftpb.MessageType) bool {
	if slices.Contains(c.book.Removed, id) {
		return false
	}
	if c.inConfig(id) {
		return true
	}
	if _, ok := c.book.Get(id); ok {
		return true
	}
	if _, ok := c.cfg.Peers[id]; ok {
		return true
	}
	switch t {
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgSnap,
		raftpb.MessageType_MsgTimeoutNow, raftpb.MessageType_MsgVote, raftpb.MessageType_MsgPreVote:
		return true
	}
	return false
}

// checkAppend refuses an append whose entries do not follow its (index,
// term) one by one, with terms that never go down nor pass the sender's
// term: what a leader sends, and what raft assumes without checking (its
// conflict check panics on such entries). Entries that follow start past
// the commit index, which raft checks first, so they never conflict with
// a committed entry.
func checkAppend(m *raftpb.Message) error {
	index, term := m.GetIndex(), m.GetLogTerm()
	for _, e := range m.GetEntries() {
		if e.GetIndex() != index+1 || e.GetTerm() < term {
			return fmt.Errorf("entry (index %d, term %d) does not follow (index %d, term %d)", e.GetIndex(), e.GetTerm(), index, term)
		}
		index, term = e.GetIndex(), e.GetTerm()
	}
	if term > m.GetTerm() {
		return fmt.Errorf("entry (index %d, term %d) is past the sender's term %d", index, term, m.GetTerm())
	}
	return nil
}

// checkSnapshot refuses a peer's snapshot that raft or this member could
// not install: a configuration raft cannot restore (it panics: no voter
// left, say, when the configuration names a member only as a learner), or
// data that does not decode (raft has it stored before the member applies
// it, and the apply's failure would then stop the member at every start).
// It returns what it decoded.
func checkSnapshot(s *raftpb.Snapshot) (*decodedSnapshot, error) {
	md := s.GetMetadata()
	if _, _, err := confchange.Restore(confchange.Changer{
		Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: md.GetIndex(),
	}, raftpb.EnsureConfState(md.GetConfState())); err != nil {
		return nil, fmt.Errorf("configuration %v: %w", md.GetConfState(), err)
	}
	m, book, hasBook, err := DecodeSnapshot(s.GetData())
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	return &decodedSnapshot{index: md.GetIndex(), term: md.GetTerm(), data: s.GetData(), m: m, book: book, hasBook: hasBook}, nil
}

func confHas(cs *raftpb.ConfState, id uint64) bool {
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		if slices.Contains(ids, id) {
			return true
		}
	}
	return false
}

// inConfig says whether id is a voter or learner of the configuration.
func (c *Core) inConfig(id uint64) bool { return confHas(c.cs, id) }

// peerMessageAllowed filters out local-only message types.
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

// Submit takes a client request at local time now. Its Answer comes out in
// a later Ready.
func (c *Core) Submit(now time.Duration, r Request) {
	if c.stopped {
		c.answers = append(c.answers, Answer{Handle: r.Handle, Key: r.Key, Err: ErrStopped})
		return
	}
	if c.draining && !r.Stale {
		c.answers = append(c.answers, Answer{Handle: r.Handle, Key: r.Key, Err: ErrHandingOver})
		return
	}
	if err := c.admit(); err != nil {
		c.answers = append(c.answers, Answer{Handle: r.Handle, Err: err})
		return
	}
	if r.Change != nil {
		c.changeMembership(r)
		return
	}
	c.lm.Submit(now, r)
	c.collect(now)
}

// Abandon records that the requester of handle (a request on key) gave up
// (rule 7). token is the token of a Granted answer that reached the driver
// after the requester left (0 if none): that lock is released.
func (c *Core) Abandon(handle uint64, key string, token uint64) {
	if c.stopped {
		return
	}
	c.lm.Abandon(handle, key, token)
	c.collect(0)
}

// ReportUnreachable tells raft a message to id could not be sent.
func (c *Core) ReportUnreachable(id uint64) { c.rn.ReportUnreachable(id) }

// ReportSnapshot tells raft whether a snapshot sent to id arrived.
func (c *Core) ReportSnapshot(id uint64, failed bool) {
	st := raft.SnapshotFinish
	if failed {
		st = raft.SnapshotFailure
	}
	c.rn.ReportSnapshot(id, st)
}

// collect moves the lock manager's decisions into the core: answers out,
// proposals queued, confirming reads started.
func (c *Core) collect(now time.Duration) {
	for {
		fx := c.lm.TakeEffects()
		if len(fx.Proposals)+len(fx.Answers)+len(fx.Reads)+fx.GhostReleases+fx.OrphansApplied == 0 {
			return
		}
		c.queue = append(c.queue, fx.Proposals...)
		c.answers = append(c.answers, fx.Answers...)
		c.metrics.Add(GhostReleases, uint64(fx.GhostReleases))
		c.metrics.Add(OrphanGrantsApplied, uint64(fx.OrphansApplied))
		for _, h := range fx.Reads {
			if c.role != raft.StateLeader {
				// Stepped down since the lock manager decided: raft would
				// forward the ReadIndex to a leader this member may not
				// reach.
				c.lm.Confirmed(now, h, ErrUnavailable)
				continue
			}
			c.rseq++
			rctx := binary.BigEndian.AppendUint64(nil, c.rseq)
			c.reads = append(c.reads, &pendingRead{handle: h, rctx: string(rctx), until: c.ticks + uint64(3*c.cfg.ElectionTicks)})
			c.rn.ReadIndex(rctx)
		}
	}
}

// HasReady says whether Ready has anything to do.
func (c *Core) HasReady() bool {
	if c.rd != nil {
		return false // Advance first
	}
	return (len(c.queue) > 0 && !c.pipelineFull()) || len(c.answers) > 0 || len(c.applied) > 0 || len(c.events) > 0 || c.compaction != nil ||
		(!c.stopped && c.rn.HasReady())
}

// Ready returns what the driver must do next; Advance must follow before
// the next Ready.
func (c *Core) Ready(now time.Duration) Ready {
	var out Ready
	if c.rd != nil {
		panic("member: Ready called twice without Advance")
	}
	if !c.stopped {
		c.propose(now)
	}
	if !c.stopped && c.rn.HasReady() {
		rd := c.rn.Ready()
		c.rd = &rd
		if raft.IsEmptySnap(rd.Snapshot) {
			c.checked = nil // raft did not take the snapshot Step checked
		}
		c.observeRole(now, &rd)
		if n := len(rd.Entries); n > 0 {
			c.last = rd.Entries[n-1].GetIndex()
		}
		out.HardState = c.hooks.hardStateToSave(&rd)
		out.Entries = rd.Entries
		if !raft.IsEmptySnap(rd.Snapshot) {
			out.Snapshot = rd.Snapshot
		}
		out.Sync = c.hooks.mustSync(&rd)
		for _, m := range rd.Messages {
			if c.role == raft.StateLeader && mayPrecedePersist(m.GetType()) {
				out.SendBeforePersist = append(out.SendBeforePersist, m)
			} else {
				out.Messages = append(out.Messages, m)
			}
		}
		for _, rs := range rd.ReadStates {
			for _, r := range c.reads {
				if r.rctx == string(rs.RequestCtx) {
					r.index, r.known = rs.Index, true
				}
			}
		}
		c.hooks.atReady(c, now, &rd)
	}
	out.Answers, c.answers = c.answers, nil
	out.Applied, c.applied = c.applied, nil
	out.Events, c.events = c.events, nil
	out.Compaction, c.compaction = c.compaction, nil
	c.lm.checkInvariants()
	return out
}

// mayPrecedePersist says whether a leader may send a message of type t
// before its own write is durable: what it sends to replicate or to keep
// its lease promises nothing about its own disk (raft thesis 10.2.1).
// Anything else (a vote, an acknowledgement) waits for the write.
func mayPrecedePersist(t raftpb.MessageType) bool {
	switch t {
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgSnap,
		raftpb.MessageType_MsgTimeoutNow, raftpb.MessageType_MsgReadIndexResp:
		return true
	}
	return false
}

// observeRole records a role, leader or term change that rd announces.
func (c *Core) observeRole(now time.Duration, rd *raft.Ready) {
	termChanged := rd.HardState != nil && rd.HardState.GetTerm() != c.term
	if rd.SoftState == nil && !termChanged {
		return
	}
	bs := c.rn.BasicStatus()
	prevLead, prevRole, prevTerm := c.lead, c.role, c.term
	c.term, c.lead, c.role = bs.GetTerm(), knownLeader(bs), bs.RaftState
	if c.lead != prevLead {
		c.metrics.Add(LeaderChanges, 1)
		c.log.Info("leader changed", "leader", c.lead, "previous", prevLead, "term", c.term, "role", RoleName(c.role))
	} else if c.role != prevRole {
		c.log.Info("role changed", "role", RoleName(c.role), "term", c.term, "leader", c.lead)
	}
	leader := c.role == raft.StateLeader
	if !leader {
		c.reads = nil      // Become below ends their requests
		c.draining = false // handed over: a follower redirects as usual
	}
	if p := c.pending; p != nil && (!leader || c.term != p.term) {
		// The change may still commit under the next leader.
		c.pending = nil
		c.answers = append(c.answers, Answer{Handle: p.handle, Err: ErrOutcomeUnknown})
	}
	if !leader || c.term != prevTerm {
		// Commands decided but never handed to raft (NoBatch proposes
		// one per Ready) definitely did not happen: Unavailable, not the
		// OutcomeUnknown that Become gives proposed ones.
		c.dropQueue()
	}
	c.lm.Become(leader, c.term, c.lead)
	c.collect(now)
	c.metrics.Set(IsLeader, b2f(leader))
	c.metrics.Set(HasLeader, b2f(c.lead != 0))
	c.metrics.Set(Term, float64(c.term))
}

// knownLeader is the leader a member follows. A (pre-)candidate follows
// none: raft keeps the last leader's id through a pre-vote, which would
// have a member whose leader died report that leader forever (pre-votes
// never raise the term while no quorum answers).
func knownLeader(bs raft.BasicStatus) uint64 {
	if bs.RaftState == raft.StateCandidate || bs.RaftState == raft.StatePreCandidate {
		return 0
	}
	return bs.Lead
}

// propose turns the queue into as few entries as fit the batch limit:
// whatever was decided while the last Ready was being persisted rides in
// one entry. A command decided in an earlier term is answered, not
// proposed.
func (c *Core) propose(now time.Duration) {
	if c.pipelineFull() {
		return
	}
	for len(c.queue) > 0 {
		queued := c.queue
		c.queue = nil
		if c.cfg.NoBatch && len(queued) > 1 {
			n := groupLen(queued)
			c.queue, queued = queued[n:], queued[:n]
		}
		bs := c.rn.BasicStatus()
		q := make([]Proposal, 0, len(queued))
		for _, p := range queued {
			switch {
			case bs.RaftState == raft.StateLeader && p.Term == bs.GetTerm():
				q = append(q, p)
			case p.Term == c.lm.Term():
				// Still the lock manager's term (raft stepped down and the
				// Ready that says so is next): undo its bookkeeping.
				c.lm.Drop(now, []fsm.Envelope{p.Env})
			default:
				c.lm.DropStale(p.Env)
			}
		}
		for len(q) > 0 {
			k := batchLen(q, c.cfg.MaxBatch)
			batch := make([]fsm.Envelope, k)
			for i := range batch {
				batch[i] = q[i].Env
			}
			q = q[k:]
			c.metrics.Add(Proposals, 1)
			c.metrics.ObserveBatch(len(batch))
			if err := c.rn.Propose(fsm.EncodeBatch(batch)); err != nil {
				c.lm.Drop(now, batch)
			}
		}
		if c.cfg.NoBatch {
			c.collect(now)
			return
		}
		// Dropping may grant the next waiter, which queues again.
		c.collect(now)
	}
}

// DefaultMaxUncommitted is Config.MaxUncommitted's default.
const DefaultMaxUncommitted = 2

// pipelineFull says whether this leader has MaxUncommitted entries
// proposed and not committed: its queue then waits for a commit and goes
// into one entry. Without the bound a leader whose followers fall behind
// for a moment proposes an entry of one or two commands per fsync of its
// own, thousands a second: every entry costs each member a message, an
// append and a sync, so the followers fall further behind, and the
// cluster settles into a mode with a fifth of its throughput and many
// times its p99 (measured at 100,000 held locks, where a follower's
// snapshot gives the push). A bound of a few entries still pipelines.
func (c *Core) pipelineFull() bool {
	return c.role == raft.StateLeader && c.cfg.MaxUncommitted > 0 &&
		c.last > c.commit && c.last-c.commit >= uint64(c.cfg.MaxUncommitted)
}

// groupLen is how many proposals from the first must share its entry: it
// and every one bound to it by WithNext.
func groupLen(q []Proposal) int {
	n := 1
	for n < len(q) && q[n-1].WithNext {
		n++
	}
	return n
}

// maxEnvelopeOverhead bounds an envelope's encoding besides its key and
// owner: the op, the id, the tag and the command's numbers as varints.
const maxEnvelopeOverhead = 1 + 8*binary.MaxVarintLen64

// batchLen is how many of q's proposals the next entry takes: at most
// maxBatch commands (more only to keep a group whole) and fsm.MaxEntryBytes
// of encoding, never cutting a group (groupLen).
func batchLen(q []Proposal, maxBatch int) int {
	n, size := 0, 16
	for n < len(q) {
		g := groupLen(q[n:])
		gsize := 0
		for _, p := range q[n : n+g] {
			gsize += maxEnvelopeOverhead + len(p.Env.Cmd.Key) + len(p.Env.Cmd.Owner)
		}
		if n > 0 && (n+g > maxBatch || size+gsize > fsm.MaxEntryBytes) {
			break
		}
		n, size = n+g, size+gsize
	}
	return n
}

// Advance tells the core the last Ready was handled: it applies the
// committed entries and snapshot the Ready carried. An error stops the
// member (its state machine cannot follow the log).
func (c *Core) Advance(now time.Duration) error {
	if c.rd == nil {
		return nil
	}
	rd := c.rd
	c.rd = nil
	if !c.appliedR {
		if err := c.apply(now, rd); err != nil {
			// raft was not advanced: the core cannot go on.
			c.Stop()
			return err
		}
	}
	c.appliedR = false
	c.rn.Advance(*rd)
	c.resolveReads(now)
	c.collect(now)
	c.lm.checkInvariants()
	return nil
}

// resolveReads continues the requests whose quorum read is confirmed and
// whose index has applied.
func (c *Core) resolveReads(now time.Duration) {
	applied, _ := c.lm.Applied()
	c.endReads(now, func(r *pendingRead) bool { return r.known && r.index <= applied }, nil)
}

// endReads answers, with err (nil: confirmed), the pending reads for which
// ended says so, in the order they came, and keeps the others.
func (c *Core) endReads(now time.Duration, ended func(*pendingRead) bool, err error) {
	live := c.reads[:0]
	var done []uint64
	for _, r := range c.reads {
		if ended(r) {
			done = append(done, r.handle)
		} else {
			live = append(live, r)
		}
	}
	c.reads = live
	for _, h := range done {
		c.lm.Confirmed(now, h, err)
	}
}

func (c *Core) apply(now time.Duration, rd *raft.Ready) error {
	if !raft.IsEmptySnap(rd.Snapshot) {
		md := rd.Snapshot.GetMetadata()
		m, book, hasBook, err := c.decodeSnapshot(rd.Snapshot)
		if err != nil {
			return fmt.Errorf("install snapshot at %d: %w", md.GetIndex(), err)
		}
		if hasBook {
			c.book = book
			c.bookVersion++
		}
		c.lm.Restore(m, md.GetIndex(), md.GetTerm(), now)
		c.cs = md.GetConfState()
		if len(c.cs.GetVoters()) > 0 && !c.inConfig(c.cfg.ID) {
			c.removed = true // removed while it was away
		}
		c.lastSnap = md.GetIndex()
		c.appliedAt = c.ticks
		c.metrics.Add(SnapshotsInstalled, 1)
		c.noteSnapshot(md.GetIndex())
		c.log.Info("installed snapshot", "index", md.GetIndex())
	}
	applied, _ := c.lm.Applied()
	for _, e := range rd.CommittedEntries {
		if e.GetIndex() <= applied {
			continue
		}
		var logged []LoggedCommand
		if t := e.GetType(); t == raftpb.EntryType_EntryConfChangeV2 || t == raftpb.EntryType_EntryConfChange {
			c.applyConfChange(now, e)
		}
		if e.GetType() == raftpb.EntryType_EntryNormal && len(e.GetData()) > 0 {
			envs, err := fsm.DecodeBatch(e.GetData())
			if err != nil {
				// Identical bytes on every member: skipping is deterministic.
				c.log.Error("skipping undecodable entry", "index", e.GetIndex(), "err", err)
			}
			for _, env := range envs {
				prev, held := c.beforeApply(env)
				res := c.lm.Apply(now, env, e.GetTerm())
				c.noteEvent(e.GetIndex(), env, res, prev, held)
				c.metrics.Add(CommandsApplied, 1)
				if c.cfg.Journal {
					logged = append(logged, NewLoggedCommand(e.GetIndex(), e.GetTerm(), env, res))
				}
			}
		}
		if c.cfg.Journal {
			c.applied = append(c.applied, AppliedEntry{Index: e.GetIndex(), Term: e.GetTerm(), Commands: logged})
		}
		if c.lm.AppliedEntry(e.GetIndex(), e.GetTerm()) {
			c.log.Info("leader ready: applied the first entry of its term", "term", c.term, "index", e.GetIndex())
		}
		applied = e.GetIndex()
		c.logBytes += uint64(len(e.GetData()))
		c.appliedAt = c.ticks
		c.metrics.Add(EntriesApplied, 1)
	}
	if rd.HardState != nil {
		c.commit = max(c.commit, rd.HardState.GetCommit())
	}
	c.commit = max(c.commit, applied)
	c.metrics.Set(AppliedIndex, float64(applied))
	c.metrics.Set(CommitIndex, float64(c.commit))
	c.metrics.Set(ApplyLag, float64(c.commit-min(c.commit, applied)))
	c.metrics.Set(LocksHeld, float64(c.lm.machine.Len()))
	if applied > c.lastSnap && (c.snapshotDue(applied) || c.snapshotNow) {
		c.snapshotNow = false
		compactTo := uint64(1)
		if applied > c.cfg.SnapshotKeep {
			compactTo = applied - c.cfg.SnapshotKeep
		}
		table, changes := c.lm.machine.FreezeChanges()
		c.compaction = &Compaction{Index: applied, ConfState: c.cs, Table: table, Book: c.book.clone(), CompactTo: compactTo,
			Changes: changes, Base: c.lastSnap, MaxDeltaBytes: c.maxDeltaBytes(table.EncodedSize()), MaxParts: c.maxParts()}
		c.staggered = c.staggered || c.lm.machine.EncodedSize() >= smallTable
		c.lastSnap, c.logBytes = applied, 0
	}
	return nil
}

// snapshotDue says whether the log applied since the last snapshot is
// worth replacing by one: SnapshotEvery entries, and (what keeps a big
// table from being written over and over) at least as many bytes as the
// table's snapshot. Each snapshot then costs at most the log it retires,
// so its cost per command stays flat however big the table. (At half the
// table, snapshots of 100,000 locks took a fifth of a loaded member's
// throughput; the price of the full table is that much more log kept.)
// A table under smallTable costs nothing worth waiting for.
//
// Members apply the same entries, so without more they would all encode
// a big table at once: three members encoding a million locks together
// doubled the cluster's p99 for the seconds it took. A member's first
// snapshot of a big table therefore waits for (ID mod staggerSlots) /
// staggerSlots of the table's size more log; every later one comes a
// table's worth after its last, so the members' snapshots stay that far
// apart and at most one member at a time (a follower, two times in three)
// is slowed by one.
func (c *Core) snapshotDue(applied uint64) bool {
	if c.cfg.DeltaSnapshots && c.lm.machine.ChangedSize() >= maxPendingChanges {
		return true
	}
	if applied-c.lastSnap < c.cfg.SnapshotEvery {
		return false
	}
	if c.cfg.DeltaSnapshots {
		return true
	}
	table := c.lm.machine.EncodedSize()
	if c.cfg.SnapshotByEntries || table < smallTable {
		return true
	}
	need := table
	if !c.staggered {
		need += table / staggerSlots * (c.cfg.ID % staggerSlots)
	}
	return c.logBytes >= need
}

// maxPendingChanges bounds the keys a member with DeltaSnapshots
// remembers as changed (in encoded bytes) before it snapshots them, so
// that a fill of a million keys between two snapshots does not keep a
// copy of every key.
const maxPendingChanges = 64 << 20

// maxDeltaBytes is how much delta a store may keep on a whole table of
// the given size before it writes the table again: one to two times the
// table (by member id), so that a restart, and a follower receiving the
// chain, read at most about three tables' worth, the whole-table writes
// stay a table's worth of change apart, and members' come apart. (A table
// filled from empty is deltas of about its own size.)
func (c *Core) maxDeltaBytes(table uint64) uint64 {
	return max(table, smallTable) / staggerSlots * (staggerSlots + c.cfg.ID%staggerSlots)
}

// maxParts is the longest chain a store may keep: a base and deltas, each
// a file to read when the member restarts (a delta of a quiet interval is
// a few kilobytes). 1,024 to 1,920 by member id, for the reason of
// maxDeltaBytes: at a snapshot every 1,000 entries of a busy member, the
// whole table is written every half hour or less often.
func (c *Core) maxParts() int { return 1024 + 128*int(c.cfg.ID%staggerSlots) }

// smallTable is the encoded size under which a table is snapshotted every
// SnapshotEvery entries whatever the log's size.
const smallTable = 1 << 20

// staggerSlots is the number of phases members' snapshots of a big table
// are spread over: IDs 1 to 7 each have their own.
const staggerSlots = 8

// Stop ends every request in progress (their answers: TakeAnswers); the
// member takes no more input.
func (c *Core) Stop() {
	if c.stopped {
		return
	}
	// Commands decided but not yet handed to raft (the loop takes calls
	// while a write syncs) did not happen: Unavailable, before Stop ends
	// the proposed ones as OutcomeUnknown.
	c.dropQueue()
	c.lm.Stop()
	c.collect(0)
	if p := c.pending; p != nil {
		c.pending = nil
		c.answers = append(c.answers, Answer{Handle: p.handle, Err: ErrOutcomeUnknown})
	}
	c.queue, c.reads = nil, nil
	c.stopped = true
}

// dropQueue answers the commands decided but never handed to raft: they
// definitely did not happen. No waiter is granted in their place (the
// member is stepping down or stopping).
func (c *Core) dropQueue() {
	for _, p := range c.queue {
		if p.Term == c.lm.Term() {
			c.lm.DropAll([]fsm.Envelope{p.Env})
		} else {
			c.lm.DropStale(p.Env)
		}
	}
	c.queue = nil
}

// TakeAnswers returns and clears the answers not yet handed out in a Ready.
func (c *Core) TakeAnswers() []Answer {
	a := c.answers
	c.answers = nil
	return a
}

// Status returns this member's view of the cluster. Applied, Digest and
// Locks are read together, so two members at the same applied index report
// the same digest.
func (c *Core) Status() Status {
	applied, _ := c.lm.Applied()
	return Status{
		ID: c.cfg.ID, Role: RoleName(c.role), Term: c.term, Leader: c.lead,
		Commit: max(c.commit, applied), Applied: applied, Locks: uint64(c.lm.machine.Len()),
		LastToken: c.lm.machine.LastToken(), Digest: c.lm.machine.Digest(),
		Voters: c.cs.GetVoters(), Learners: c.cs.GetLearners(),
	}
}

// Leader returns the leader this member knows (0: none) and whether it is
// that leader.
func (c *Core) Leader() (id uint64, self bool) { return c.lead, c.role == raft.StateLeader }

// Applied returns the applied index.
func (c *Core) Applied() uint64 {
	a, _ := c.lm.Applied()
	return a
}

// Healthy says why this member cannot serve, as etcd's /health does: it
// knows no leader, or it has not applied what is committed for ten election
// timeouts. nil means healthy.
func (c *Core) Healthy() error {
	if c.stopped {
		return ErrStopped
	}
	if c.lead == 0 {
		return errors.New("no leader")
	}
	applied := c.Applied()
	stall := uint64(10 * c.cfg.ElectionTicks)
	if c.commit > applied && c.ticks-c.appliedAt > stall {
		return fmt.Errorf("not applying: %d committed entries not applied for %d ticks", c.commit-applied, c.ticks-c.appliedAt)
	}
	return nil
}

// RoleName names a raft role as Status reports it.
func RoleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	}
	return "follower"
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// CanDecide says why this member may not make lock decisions now (not the
// leader, or its term barrier not yet passed); nil when it may.
func (c *Core) CanDecide() error { return c.lm.ready() }

// Waiters returns how many acquires are queued on key.
func (c *Core) Waiters(key string) int { return len(c.lm.waiters[key]) }

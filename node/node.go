// Package node runs one raftlock cluster member in production: it drives
// the synchronous member core (package member) from one goroutine with the
// system clock, the TCP peer transport and the pebble log store, and offers
// the in-process API (Acquire, Release, Renew, Get, Status) that the client
// server and tests call. It has no lock logic of its own.
package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node/clock"
	"github.com/raftlock/raftlock/node/logstore"
	"github.com/raftlock/raftlock/node/peer"
)

// Bugs lists the planted bugs by name (see Config.Bug).
func Bugs() []string { return member.Bugs() }

// Config configures one member. The embedded member.Config holds the
// core's settings (ID, Peers, the raft and snapshot tuning, Bug, Limits,
// Logger) with their defaults (member.Config.SetDefaults); New sets the
// fields the driver owns (its Storage, Journal, MaxAppendBytes, Metrics,
// SeqStart) itself.
type Config struct {
	member.Config

	PeerListen string // where to listen for peers; default Peers[ID]
	ClientAddr string // announced to peers for redirects
	APIAddr    string // the HTTP/JSON API's, announced to peers for its redirects ("": none)
	DataDir    string

	TickInterval time.Duration // default DefaultTickInterval
	// NoWriteOverlap: the loop waits for each Ready's write, taking no
	// call or message meanwhile (ablation of the write overlap, run).
	NoWriteOverlap bool
	// WatchBuffer is how many events a watch may leave unread before it
	// is cut off (default DefaultWatchBuffer; Watch).
	WatchBuffer int
	// WatchHistory is how many recent lock events the member keeps for
	// watches that resume after a revision (default
	// DefaultWatchHistory; negative: none, so a watch resumes only from
	// now). Keeping them means the member produces lock events always.
	WatchHistory int

	Clock     clock.Clock    // default: system clock
	Transport peer.Transport // default: TCP on Peers[ID]
	// Storage is the log store (default: pebble in DataDir); it stands
	// for member.Config.Storage, which New sets to it.
	Storage logstore.Store

	// PeerTLS, when set, makes the default TCP transport mutual TLS with
	// these certificates (see peer.Config.TLS).
	PeerTLS *tlsconfig.Reloader
	// ClusterID is the cluster's id, checked in every peer hello with this
	// member's incarnation (see peer.Identity); 0: the one stored in
	// DataDir, else derived from Peers at the first boot.
	ClusterID uint64

	// AuditJournal, when set, is a file where every applied entry and its
	// results are appended for the chaos harness's post-run audit (see
	// CommittedLog). Only with fault injection: it grows without bound.
	AuditJournal string

	// SnapshotChunkSize is the most snapshot data one peer frame carries
	// (default peer.DefaultSnapshotChunkSize); PeerFrameLimit is the
	// largest peer frame this member reads (default
	// peer.DefaultFrameLimit). See peer.Config.
	SnapshotChunkSize int
	PeerFrameLimit    int
	// The peer port's limits on connections before and after their
	// hello (peer.Config; zero: the peer package's defaults).
	PeerHelloTimeout        time.Duration
	MaxPeerPending          int
	MaxPeerPendingPerAddr   int
	MaxPeerStreamsPerMember int

	// Join, for the first start of a member added to a running cluster
	// (raftlock member add), is what it learned from that cluster. A data
	// directory that holds data ignores it, as it ignores Peers beyond
	// this member's own entry: a member never bootstraps twice, and its
	// configuration is the one its log holds.
	Join *Join
}

// DefaultTickInterval is Config.TickInterval's default.
const DefaultTickInterval = 20 * time.Millisecond

// SetDefaults fills the tuning fields left zero with their defaults (the
// core's from member.Config.SetDefaults).
func (c *Config) SetDefaults() {
	if c.TickInterval <= 0 {
		c.TickInterval = DefaultTickInterval
	}
	if c.WatchHistory == 0 {
		c.WatchHistory = DefaultWatchHistory
	}
	if c.WatchBuffer <= 0 {
		c.WatchBuffer = DefaultWatchBuffer
	}
	c.Config.SetDefaults()
}

// setDefaults is SetDefaults, and the system clock and a logger of
// warnings to stderr where none was given.
func (c *Config) setDefaults() {
	c.SetDefaults()
	if c.Clock == nil {
		c.Clock = clock.NewSystem()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
}

// Node is one running member: a goroutine that owns the member core and
// feeds it ticks, peer messages and client calls, and does what each Ready
// says.
type Node struct {
	cfg       Config
	log       *slog.Logger
	clock     clock.Clock
	storage   logstore.Store
	transport peer.Transport
	metrics   *Metrics
	listeners listenerHealth // listeners.go
	journal   *journal       // nil unless Config.AuditJournal
	identity  *peer.Identity

	core *member.Core // owned by the loop goroutine
	// The address book version the transport's peers follow (loop-owned).
	bookVersion uint64
	bookSynced  bool

	// Snapshots are encoded and stored off the loop (compact): at most
	// one at a time, and the latest one that came meanwhile waits in
	// nextCompaction, with the ones it replaced, oldest first, in
	// replaced (their changes only: cp's delta must carry them). All
	// loop-owned. compactc brings the outcome back.
	compacting     bool
	nextCompaction *member.Compaction
	replaced       []*member.Compaction
	compactc       chan compactDone
	compactWG      sync.WaitGroup

	handles  atomic.Uint64
	watchers watchers // Watch's streams (watch.go)
	// callc carries calls and their abandonment in one queue, so the loop
	// always sees a call before the news that its caller left.
	callc   chan callInput
	recvc   chan *raftpb.Message
	reportc chan peerReport
	fnc     chan func(*member.Core)

	statusMu sync.Mutex
	last     member.Status // published after each loop turn, for a stopped node

	stopc    chan struct{} // closed by Close
	loopDone chan struct{} // closed once the loop answered its last calls
	errMu    sync.Mutex
	fatal    error
	closed   sync.Once
	started  bool
}

// call is one client request and where its answer goes.
type call struct {
	req  member.Request
	done chan member.Answer // buffered: the loop never blocks on a caller
	// Owned by the loop: the answer was sent, and the token it granted.
	answered bool
	granted  uint64
}

// callInput is a new call, or the news that its caller left.
type callInput struct {
	cl      *call
	abandon bool
}

// streamCompactor is a store that takes a snapshot's data as a stream
// (logstore.Disk.CompactFrom).
type streamCompactor interface {
	CompactFrom(ctx context.Context, c logstore.Compaction) error
}

type compactDone struct {
	index uint64
	took  time.Duration
	err   error
}

type peerReport struct {
	id       uint64
	snapshot bool
	failed   bool
	removed  bool // peer id says this member was removed
}

// New opens the member's storage and prepares it; Start runs it.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.prepare(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("member", cfg.ID)
	n := &Node{
		cfg: cfg, log: log, clock: cfg.Clock, metrics: NewMetrics(true),
		callc: make(chan callInput, callQueueLen),
		recvc: make(chan *raftpb.Message, 1024), reportc: make(chan peerReport, 256),
		fnc: make(chan func(*member.Core)), stopc: make(chan struct{}), loopDone: make(chan struct{}),
		compactc: make(chan compactDone, 1),
	}
	if err := n.openStorage(); err != nil {
		return nil, err
	}
	err := n.openCore()
	var sfe *logstore.SnapshotFileError
	if errors.As(err, &sfe) {
		// Its snapshot's files are damaged: the member refuses to start,
		// naming them, and never serves without its state (damage.go).
		err = &logstore.DamagedError{Dir: cfg.DataDir, File: sfe.Files, Err: err}
	}
	n.transport = cfg.Transport
	if err == nil && n.transport == nil {
		var tcp *peer.TCP
		if tcp, err = n.newTCP(); err == nil {
			n.transport = tcp
		}
	}
	if err != nil {
		n.storage.Close()
		return nil, err
	}
	n.last = n.core.Status()
	return n, nil
}

// prepare checks cfg, and for a joiner reaches the current members at
// once.
func (cfg *Config) prepare() error {
	if cfg.ID == 0 {
		return errors.New("member id must be > 0")
	}
	if cfg.Join != nil {
		// The joiner reaches the current members at once, and starts
		// from the bootstrap configuration as the first members did.
		peers := maps.Clone(cfg.Join.Members)
		maps.Copy(peers, cfg.Peers)
		cfg.Peers = peers
		cfg.ClusterID = cfg.Join.ClusterID
	}
	if _, ok := cfg.Peers[cfg.ID]; !ok {
		return fmt.Errorf("member %d is not in the peer list", cfg.ID)
	}
	if cfg.MaxBatch > fsm.MaxBatch {
		return fmt.Errorf("max batch %d exceeds the codec's limit of %d commands per entry", cfg.MaxBatch, fsm.MaxBatch)
	}
	if !member.ValidBug(cfg.Bug) {
		return fmt.Errorf("unknown planted bug %q", cfg.Bug)
	}
	return nil
}

// openStorage opens the member's log store (pebble in DataDir unless
// Config.Storage), seeded at a first start with the bootstrap
// configuration.
func (n *Node) openStorage() error {
	cfg := n.cfg
	bootstrap := cfg.Peers
	if cfg.Join != nil {
		bootstrap = cfg.Join.Bootstrap
	}
	voters := slices.Sorted(maps.Keys(bootstrap))
	n.storage = cfg.Storage
	if n.storage != nil {
		return nil
	}
	if cfg.DataDir == "" {
		return errors.New("a data directory is required")
	}
	initial := logstore.InitialSnapshot(voters, member.EncodeSnapshot(fsm.New().Snapshot(), member.NewBook(bootstrap)))
	var err error
	// The planted bug damaged-log-trusted is chosen once, here: the
	// store's open follows its option.
	opts := logstore.Options{UnsafeTrustDamagedLog: cfg.Bug == member.BugDamagedLogTrusted}
	if n.storage, err = logstore.OpenWith(cfg.DataDir, vfs.Default, initial, n.log, opts); err != nil {
		return err
	}
	if d, ok := n.storage.(*logstore.Disk); ok {
		n.metrics.NoteOpened(d.Opened())
	}
	if d, ok := n.storage.(interface{ StorageStats() logstore.StorageStats }); ok {
		n.metrics.WatchStorage(d.StorageStats)
	}
	if cfg.Join != nil {
		if err := checkJoinStore(n.storage, initial); err != nil {
			n.storage.Close()
			return fmt.Errorf("join with data directory %s: %w", cfg.DataDir, err)
		}
	}
	return nil
}

// randomSeqStart is where this start's request ids begin: a random point
// in 2^62, so that ids stay unique across restarts (answer matching and
// orphan adoption key on them) without trusting the wall clock, which may
// have stepped back. Two starts that each propose n commands overlap with
// a chance of about 2n/2^62: below 2^-24 for a month at 100,000 commands
// a second.
func randomSeqStart() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("draw request ids: %w", err)
	}
	return binary.LittleEndian.Uint64(b[:]) >> 2, nil
}

// openCore creates the member core over the store, and the audit journal.
func (n *Node) openCore() error {
	cfg := n.cfg
	var err error
	mc := cfg.Config
	mc.Storage, mc.Journal, mc.MaxAppendBytes = n.storage, cfg.AuditJournal != "", maxAppendBytes(cfg.PeerFrameLimit)
	mc.Logger, mc.Metrics = n.log, n.metrics
	if mc.SeqStart, err = randomSeqStart(); err != nil {
		return err
	}
	_, mc.DeltaSnapshots = n.storage.(streamCompactor) // it keeps a base and deltas (logstore.Compaction)
	n.core, err = member.New(mc, n.clock.Now())
	if err != nil {
		return err
	}
	// The events of the entries applied from here on: those before were
	// applied by an earlier run, or are in the snapshot.
	n.watchers.history = history{ring: make([]Event, max(cfg.WatchHistory, 0)), held: endOf(n.core.Applied())}
	if cfg.AuditJournal != "" {
		n.journal, err = openJournal(cfg.AuditJournal)
	}
	return err
}

// newTCP is the default transport: TCP to the members the log's address
// book names.
func (n *Node) newTCP() (*peer.TCP, error) {
	cfg, log := n.cfg, n.log
	// The log's address book decides whom to talk to; the flags say
	// how this member reaches the members they name, itself included.
	book, _ := n.core.Book()
	peers := peersOf(book, cfg.Peers)
	if _, ok := peers[cfg.ID]; !ok {
		peers[cfg.ID] = cfg.Peers[cfg.ID]
	}
	listen := cfg.PeerListen
	if listen == "" {
		listen = cfg.Peers[cfg.ID]
	}
	if m, ok := book.Get(cfg.ID); ok && m.PeerAddr != "" && len(cfg.Peers) == 1 && cfg.Peers[cfg.ID] == cfg.PeerListen {
		// The flags name only this member, by its bind address (a
		// joined member's restart: memberPeers), which may be
		// 0.0.0.0:port. The hellos announce where a member that does
		// not know this one yet dials it (peer.TCP.learn): the
		// address the cluster recorded when it added this member.
		peers[cfg.ID] = m.PeerAddr
	}
	pc := peer.Config{
		ID: cfg.ID, Peers: peers, Listen: listen, ClientAddr: cfg.ClientAddr, APIAddr: cfg.APIAddr, Logger: log,
		// The removed ids before the first stream: the transport takes a
		// hello from a member its log does not know (one added while
		// this member was down), and must never take a removed one for
		// such.
		Removed:              book.Removed,
		TLS:                  cfg.PeerTLS,
		ReadTimeout:          10 * time.Duration(cfg.ElectionTicks) * cfg.TickInterval,
		FrameLimit:           cfg.PeerFrameLimit,
		SnapshotChunkSize:    cfg.SnapshotChunkSize,
		HelloTimeout:         cfg.PeerHelloTimeout,
		MaxPending:           cfg.MaxPeerPending,
		MaxPendingPerAddress: cfg.MaxPeerPendingPerAddr,
		MaxStreamsPerMember:  cfg.MaxPeerStreamsPerMember,
		// Chosen once, here: the transport's code follows its hook.
		UnsafeSkipSnapshotChecks: cfg.Bug == member.BugSnapshotPartial,
		OnAcceptError:            func() { n.metrics.AcceptErrors.WithLabelValues("peer").Inc() },
		OnRefused:                func(limit string) { n.metrics.ConnectionsRefused.WithLabelValues("peer", limit).Inc() },
	}
	if cfg.DataDir != "" {
		// Written last of a first start, after the store is seeded:
		// the identity is what makes a data directory a member's (a
		// joiner without one joins again; see checkJoinStore).
		ident, err := peer.OpenIdentity(cfg.DataDir, cfg.ClusterID, cfg.Peers)
		if err != nil {
			return nil, err
		}
		pc.Identity, n.identity = ident, ident
		pc.SnapshotDir = peer.SnapshotSpoolDir(cfg.DataDir)
	}
	if src, ok := n.storage.(peer.SnapshotSource); ok {
		pc.SnapshotSource = src // the store keeps a reference to its snapshot's file, not the data
	}
	tcp, err := peer.NewTCP(pc)
	if err != nil {
		return nil, err
	}
	return tcp, nil
}

// PeerListenerErr says whether the peer port has stopped accepting
// connections (peer.TCP.ListenerErr); nil with a transport that cannot
// tell.
func (n *Node) PeerListenerErr() error {
	if t, ok := n.transport.(interface{ ListenerErr() error }); ok {
		return t.ListenerErr()
	}
	return nil
}

// maxAppendBytes keeps raft's appends well inside the peer frame limit
// (a test's small limit included): half of it, at most 1 MiB.
func maxAppendBytes(frameLimit int) uint64 {
	if frameLimit <= 0 {
		return 0 // the member's default
	}
	return uint64(min(1<<20, frameLimit/2))
}

// checkJoinStore accepts the store of a joiner's first start: empty and
// just seeded with initial, or holding exactly that seed from a first
// start cut short before it stored its identity (which it writes last).
// Anything else (a log, another cluster's or another bootstrap's seed) is
// not a joiner's leftover, and joining over it could mix two histories.
func checkJoinStore(s logstore.Store, initial *raftpb.Snapshot) error {
	snap, err := s.Snapshot()
	if err != nil {
		return fmt.Errorf("read the snapshot: %w", err)
	}
	hs, _, err := s.InitialState()
	if err != nil {
		return fmt.Errorf("read the hard state: %w", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		return fmt.Errorf("read the last index: %w", err)
	}
	// Field by field: the ConfState read back has AutoLeave set where the
	// seed left it unset, which proto.Equal tells apart.
	md, want := snap.GetMetadata(), initial.GetMetadata()
	seed := md.GetIndex() == want.GetIndex() && md.GetTerm() == want.GetTerm() &&
		slices.Equal(md.GetConfState().GetVoters(), want.GetConfState().GetVoters()) &&
		len(md.GetConfState().GetLearners()) == 0 && bytes.Equal(snap.GetData(), initial.GetData())
	if !seed || !raft.IsEmptyHardState(hs) || last != 0 {
		return fmt.Errorf("it holds a raft log (snapshot at %d, last index %d, term %d) but no cluster identity: not what a joiner's first start leaves; join with an empty directory",
			snap.GetMetadata().GetIndex(), last, hs.GetTerm())
	}
	return nil
}

// Start begins serving peers and running the member.
// After an error the caller still calls Close, which releases the storage.
func (n *Node) Start() error {
	if err := n.transport.Start(n); err != nil {
		return err
	}
	n.noteFirstIndex()
	n.started = true
	go n.run()
	return nil
}

// Close stops the member at once, as a crash would between two fsyncs:
// nothing acknowledged is lost because nothing is acknowledged before it
// is durable. Calls in progress end with ErrOutcomeUnknown when their
// command was proposed, ErrStopped or ErrUnavailable otherwise.
func (n *Node) Close() error {
	n.closed.Do(func() {
		close(n.stopc)
		n.transport.Close()
		if n.started {
			<-n.loopDone
		} else {
			close(n.loopDone)
		}
		n.compactWG.Wait() // a snapshot being written is dropped whole or stored whole
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

// Receive implements peer.Handler.
func (n *Node) Receive(m *raftpb.Message) {
	select {
	case n.recvc <- m:
	case <-n.stopc:
	}
}

// ReportUnreachable implements peer.Handler.
func (n *Node) ReportUnreachable(id uint64) {
	select {
	case n.reportc <- peerReport{id: id}:
	default:
	}
}

// ReportSnapshot implements peer.Handler. It never blocks its caller, which
// may be the loop itself (Send with a full peer queue), the only reader of
// reportc; and it never drops the report, without which raft would leave
// the follower waiting for a snapshot forever.
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

// run owns the core: ticks, peer messages and client calls go in; each
// Ready is persisted in one write and its answers delivered.
func (n *Node) run() {
	defer close(n.loopDone)
	ticker := n.clock.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	l := &loop{n: n, calls: make(map[uint64]*call), savedc: make(chan error, 1)}
	defer l.stop()
	if n.core.Removed() {
		// Removed by an entry its own snapshot covers: it stops before it
		// takes any input, as it would after applying the removal.
		n.stopRemoved()
		return
	}
	for {
		if err := l.take(ticker.C()); err != nil {
			if !errors.Is(err, errLoopEnd) {
				n.fail(err)
			}
			return
		}
		// Lock events cost the core something only while somebody
		// watches.
		n.core.SetWatching(n.watchers.active())
		if err := l.readies(); err != nil {
			n.fail(err)
			return
		}
		n.syncPeers(n.core)
		if n.core.Removed() {
			n.stopRemoved()
			return
		}
		n.publish()
	}
}

// errLoopEnd ends the loop without an error of its own: the member is
// being closed, or stopRemoved was called.
var errLoopEnd = errors.New("the loop ends")

// loop is the state of the loop goroutine (run), which owns it, and the
// member.Carrier of its Readies.
type loop struct {
	n     *Node
	calls map[uint64]*call
	// saving is the Ready whose write runs on its own goroutine; its
	// result comes on savedc. Meanwhile the loop takes calls, messages
	// and ticks (raft accepts them between Ready and Advance), so the
	// next Ready carries everything decided during the fsync in one
	// entry.
	saving *member.Ready
	savedc chan error
}

// stop ends the loop: a write under way finishes (or fails) before the
// store closes, and every caller gets an answer.
func (l *loop) stop() {
	n, c := l.n, l.n.core
	if l.saving != nil {
		// Its answers are true either way (finish).
		<-l.savedc
		n.deliver(l.calls, l.saving.Answers)
	}
	c.Stop()
	n.deliver(l.calls, c.TakeAnswers())
	for _, cl := range l.calls {
		cl.done <- member.Answer{Handle: cl.req.Handle, Err: ErrStopped}
	}
	n.watchers.endAll(ErrStopped)
	n.publish()
}

// take waits for the next input and hands it (with the inputs of its kind
// waiting behind it) to the core; an error ends the loop.
func (l *loop) take(tick <-chan time.Time) error {
	n, c := l.n, l.n.core
	select {
	case <-n.stopc:
		return errLoopEnd
	case <-tick:
		c.Tick(n.clock.Now())
	case m := <-n.recvc:
		n.step(m)
		for range 256 {
			select {
			case m := <-n.recvc:
				n.step(m)
			default:
				return nil
			}
		}
	case in := <-n.callc:
		// Every call that is waiting: they are decided together and
		// proposed in one entry.
		now := n.clock.Now()
		n.take(c, l.calls, in, now)
		for range 1024 {
			select {
			case in := <-n.callc:
				n.take(c, l.calls, in, now)
			default:
				return nil
			}
		}
	case r := <-n.reportc:
		return n.report(r)
	case f := <-n.fnc:
		f(c)
	case d := <-n.compactc:
		return n.compacted(d)
	case err := <-l.savedc:
		rd := *l.saving
		l.saving = nil
		return l.finish(rd, err)
	}
	return nil
}

// report hands the core a peer's report; a peer that refused this member
// as removed stops it.
func (n *Node) report(r peerReport) error {
	switch {
	case r.removed:
		n.log.Warn("a peer refused this member: it applied this member's removal from the cluster", "peer", r.id)
		n.stopRemoved()
		return errLoopEnd
	case r.snapshot:
		n.core.ReportSnapshot(r.id, r.failed)
	default:
		n.core.ReportUnreachable(r.id)
	}
	return nil
}

// readies carries out the core's Readies while no write is under way:
// each one's write goes on its own goroutine (the write overlap), or with
// NoWriteOverlap or NoBatch is done here.
func (l *loop) readies() error {
	n, c := l.n, l.n.core
	for l.saving == nil && c.HasReady() {
		rd := c.Ready(n.clock.Now())
		if ok, err := rd.Start(l); !ok {
			return err
		}
		if rd.Writes() && !n.cfg.NoWriteOverlap && !n.cfg.NoBatch {
			l.saving = &rd
			go func() { l.savedc <- n.save(rd) }()
			return nil
		}
		if err := l.finish(rd, n.save(rd)); err != nil {
			return err
		}
		if n.cfg.NoBatch {
			return nil
		}
	}
	return nil
}

// stopRemoved stops a member removed from the configuration; the loop
// returns right after.
func (n *Node) stopRemoved() {
	n.errMu.Lock()
	if n.fatal == nil {
		n.fatal = ErrRemoved
	}
	n.errMu.Unlock()
	n.log.Warn("this member was removed from the cluster's configuration; stopping (its data directory can be deleted)")
	go n.Close()
}

// take hands a call to the core, or tells the core its caller left: an
// unanswered call is abandoned (rule 7), and a grant already sent to a
// caller that was no longer listening is released.
func (n *Node) take(c *member.Core, calls map[uint64]*call, in callInput, now time.Duration) {
	cl := in.cl
	if !in.abandon {
		calls[cl.req.Handle] = cl
		c.Submit(now, cl.req)
		return
	}
	if cl.answered {
		if cl.granted != 0 {
			c.Abandon(cl.req.Handle, cl.req.Key, cl.granted)
		}
		return
	}
	delete(calls, cl.req.Handle)
	c.Abandon(cl.req.Handle, cl.req.Key, 0)
}

func (n *Node) step(m *raftpb.Message) {
	err := n.core.Step(m)
	if errors.Is(err, member.ErrCommitBeyondLog) {
		// A forged frame (without TLS a hello may claim any member), or
		// this member lost entries it acknowledged: either way an operator
		// must look.
		n.log.Error("refused raft message", "type", m.GetType().String(), "from", m.GetFrom(), "err", err)
		return
	}
	if err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
		n.log.Warn("dropped raft message", "type", m.GetType().String(), "from", m.GetFrom(), "err", err)
	}
}

// Journal implements member.Carrier. It journals before any snapshot
// that covers these entries, so a restart replays whatever the journal
// misses; a failed write skips the snapshot, which would make the gap
// permanent.
func (l *loop) Journal(applied []member.AppliedEntry) bool {
	j := l.n.journal
	if j == nil {
		return true
	}
	for _, e := range applied {
		j.add(e)
	}
	if err := j.flush(); err != nil {
		l.n.log.Error("audit journal write failed; snapshot postponed", "err", err)
		return false
	}
	return true
}

// Compact implements member.Carrier: the snapshot is stored off the loop
// (Node.compact), so it never fails here. The audit journal is synced
// first; when it cannot be, the snapshot is postponed to the next one due.
func (l *loop) Compact(cp *member.Compaction) error {
	if j := l.n.journal; j != nil {
		if err := j.sync(); err != nil {
			l.n.log.Error("audit journal sync failed; snapshot postponed", "err", err)
			return nil
		}
	}
	l.n.compact(cp)
	return nil
}

// Send implements member.Carrier.
func (l *loop) Send(msgs []*raftpb.Message) { l.n.transport.Send(msgs) }

// Answer implements member.Carrier.
func (l *loop) Answer(answers []member.Answer) { l.n.deliver(l.calls, answers) }

// Advance implements member.Carrier.
func (l *loop) Advance() error { return l.n.core.Advance(l.n.clock.Now()) }

// save stores rd's hard state, entries and snapshot (synced when rd.Sync).
// It may run on its own goroutine: the store is safe beside the loop's
// reads, and nothing of rd leaves the member before it returns.
func (n *Node) save(rd member.Ready) error {
	if !rd.Writes() {
		return nil
	}
	start := time.Now()
	if err := n.storage.Save(rd.HardState, rd.Entries, rd.Snapshot, rd.Sync); err != nil {
		return err
	}
	if rd.Sync {
		n.metrics.Fsyncs.Inc()
		n.metrics.FsyncSeconds.Observe(time.Since(start).Seconds())
	}
	n.metrics.EntriesPersisted.Add(float64(len(rd.Entries)))
	return nil
}

// finish is the rest of rd once its write returned err (member.Ready.Finish).
func (l *loop) finish(rd member.Ready, err error) error {
	if err != nil {
		// The answers are still true: they come from commands applied
		// after an earlier Ready was saved, or from decisions that
		// need no write. Dropping them would leave their callers to
		// hear "stopped", which reads as "nothing happened".
		l.Answer(rd.Answers)
		return fmt.Errorf("persist ready: %w", err)
	}
	if err := rd.Finish(l); err != nil {
		return err
	}
	if rd.Snapshot != nil {
		l.n.noteFirstIndex()
	}
	return nil
}

// compact encodes and stores a snapshot on a goroutine of its own: for a
// big table that takes longer than an election timeout, which the loop
// must never stop for (it sends the heartbeats). The core goes on
// applying meanwhile; the frozen table it handed over does not change.
// A compaction that comes while one is being written waits, replacing any
// that waited before it (the later one covers more).
func (n *Node) compact(cp *member.Compaction, replaced ...*member.Compaction) {
	if n.compacting {
		if prev := n.nextCompaction; prev != nil {
			prev.Table = nil // only its changes are needed: let its frozen shards go
			n.replaced = append(n.replaced, prev)
		}
		n.nextCompaction = cp
		return
	}
	n.compacting = true
	n.compactWG.Add(1)
	go func() {
		defer n.compactWG.Done()
		// Merged here, not on the loop: changes can be a few hundred
		// thousand keys.
		for i := len(replaced) - 1; i >= 0; i-- {
			cp.Absorb(replaced[i])
		}
		// A stop drops the snapshot being written: the log it would
		// have replaced is still whole.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-n.stopc:
				cancel()
			case <-ctx.Done():
			}
		}()
		start := time.Now()
		var err error
		if sc, ok := n.storage.(streamCompactor); ok {
			// Streamed to its file, yielding often: on one core the loop
			// must not wait for a table of a million locks to encode.
			c := logstore.Compaction{
				Index: cp.Index, ConfState: cp.ConfState, CompactTo: cp.CompactTo, Rate: logstore.MaxSnapshotRate,
				Write: func(w io.Writer) error { return cp.WriteTo(w, runtime.Gosched) },
			}
			if cp.Changes != nil {
				c.WriteDelta = func(w io.Writer) error { return cp.WriteDeltaTo(w, runtime.Gosched) }
				c.DeltaBase, c.MaxDeltaBytes, c.MaxParts = cp.Base, cp.MaxDeltaBytes, cp.MaxParts
			}
			err = sc.CompactFrom(ctx, c)
		} else {
			err = n.storage.Compact(cp.Index, cp.ConfState, cp.Data(), cp.CompactTo)
		}
		if ctx.Err() != nil {
			// Stopped: the cancelled write stored nothing, and a stopping
			// member has no failure to report.
			return
		}
		if err != nil {
			err = fmt.Errorf("compact log at %d: %w", cp.Index, err)
		}
		select {
		case n.compactc <- compactDone{index: cp.Index, took: time.Since(start), err: err}:
		case <-n.stopc:
		}
	}()
}

// compacted records a finished compaction and starts the one that waited.
func (n *Node) compacted(d compactDone) error {
	n.compacting = false
	if d.err != nil {
		return d.err
	}
	n.metrics.Snapshots.Inc()
	n.metrics.SnapshotSeconds.Observe(d.took.Seconds())
	n.noteFirstIndex()
	parts, deltaBytes := 0, uint64(0)
	if c, ok := n.storage.(interface{ SnapshotChain() (int, uint64) }); ok {
		parts, deltaBytes = c.SnapshotChain()
		n.metrics.SnapshotParts.Set(float64(parts))
		n.metrics.SnapshotDeltaBytes.Set(float64(deltaBytes))
	}
	n.log.Debug("stored snapshot", "index", d.index, "took", d.took, "parts", parts, "delta_bytes", deltaBytes)
	if next := n.nextCompaction; next != nil {
		replaced := n.replaced
		n.nextCompaction, n.replaced = nil, nil
		n.compact(next, replaced...)
	}
	return nil
}

// deliver hands answers to their callers, with the leader's client
// address added to a redirect.
func (n *Node) deliver(calls map[uint64]*call, answers []member.Answer) {
	for _, a := range answers {
		cl, ok := calls[a.Handle]
		if !ok {
			// The caller left before the answer: a grant it will never use
			// is released (rule 7).
			if a.Err == nil && a.Token != 0 {
				n.core.Abandon(a.Handle, a.Key, a.Token)
			}
			continue
		}
		delete(calls, a.Handle)
		cl.answered = true
		if a.Err == nil && cl.req.Op == member.OpAcquire {
			cl.granted = a.Token
		}
		if nl, ok := a.Err.(*member.NotLeaderError); ok && nl.LeaderID != 0 {
			a.Err = &member.NotLeaderError{LeaderID: nl.LeaderID, LeaderAddr: n.transport.PeerClientAddr(nl.LeaderID)}
		}
		cl.done <- a
	}
}

// publish keeps the status a stopped node still reports.
func (n *Node) publish() {
	st := n.core.Status()
	n.statusMu.Lock()
	n.last = st
	n.statusMu.Unlock()
}

// inspect runs f on the loop goroutine; false when the loop has ended.
func (n *Node) inspect(f func(*member.Core)) bool {
	return n.inspectContext(context.Background(), f) == nil
}

// errLoopEnded says the loop has ended, so f did not run.
var errLoopEnded = errors.New("the member's loop has ended")

// inspectContext runs f on the loop goroutine, unless the loop ends
// (errLoopEnded) or ctx does (its error) before the loop takes it. The
// loop runs f as soon as it takes it, so only the wait to be taken, behind
// a write the loop waits for, needs the bound.
func (n *Node) inspectContext(ctx context.Context, f func(*member.Core)) error {
	done := make(chan struct{})
	wrapped := func(c *member.Core) { f(c); close(done) }
	select {
	case n.fnc <- wrapped:
		<-done
		return nil
	case <-n.loopDone:
		return errLoopEnded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// noteFirstIndex publishes the first stored log index: the harness watches
// it to know when a lagging follower can only catch up by snapshot.
func (n *Node) noteFirstIndex() {
	if i, err := n.storage.FirstIndex(); err == nil {
		n.metrics.FirstIndex.Set(float64(i))
	}
}

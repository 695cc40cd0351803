package sim

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/internal/snapchain"
	"github.com/raftlock/raftlock/member"
)

// node is one member: its core (nil while down), its disk, its clock and
// what the driver knows about it.
type node struct {
	s    *sim
	id   uint64
	core *member.Core
	disk *Store
	clk  simClock
	// metrics are the running core's (each start makes new ones, as a
	// restarted process does); past sums each counter over the
	// incarnations before it (counted).
	metrics *member.Tally
	past    [member.NumCounters]int
	// installed counts the snapshots it installed from a leader
	// (membership.go reads it).
	installed int

	incarnation uint64
	// dead: the member panicked or stopped on an internal error; it stays
	// down for the rest of the run (reported in Crashes). stopped: an
	// injected I/O error stopped it; the disk fault's heal restarts it.
	dead, stopped bool
	down          bool // killed or crashed, not yet restarted
	paused        bool
	// saving: a Ready's write is under way (a slow sync). As raftlock
	// node does, the member goes on taking inputs meanwhile; its next
	// Ready waits for the write.
	saving  bool
	inbox   []input // inputs held while paused
	tickGen uint64

	// retired: removed from the configuration and stopped for good
	// (membership.go); nothing restarts it. retiring: its removal was
	// proposed, so a peer that applied it refuses it (deliver).
	retired, retiring bool

	// disk fault in force
	ioErr    float64 // probability that a write fails
	slowSync float64 // probability that a sync is slow
	slowMax  int64   // longest slow sync, ns
	// clientDelay is added to its client traffic by a net fault.
	clientDelay int64

	handles map[uint64]*attempt // client requests submitted and not answered
	// admin are membership changes submitted and not answered, by
	// handle: what to do with the answer (membership.go).
	admin map[uint64]func(member.Answer)
	// arriving are batched client requests on their way, by arrival time
	// (fill.go).
	arriving map[int64]*arrival

	// onSnapshot, when set, is called after the member stored a snapshot:
	// one it received (installed) or one of its own (a compaction).
	onSnapshot func(installed bool)
	// onCommit, when set, sees each Ready before its messages go out; true
	// means it crashed the member, and the Ready goes no further.
	onCommit func(rd member.Ready) bool
}

// counted is counter c of the member's cores, over all its incarnations.
func (n *node) counted(c member.Counter) int {
	if n.metrics == nil {
		return n.past[c]
	}
	return n.past[c] + int(n.metrics.Count(c))
}

// snapshotsCorrupt is how many snapshots from peers the member refused
// because their data did not decode, over all its incarnations.
func (n *node) snapshotsCorrupt() int { return n.counted(member.SnapshotsCorrupt) }

func (n *node) up() bool { return n.core != nil && !n.down && !n.dead && !n.stopped }

// restartable: the member is down and may come back (not dead, not
// removed from the configuration).
func (n *node) restartable() bool { return n.core == nil && !n.dead && !n.retired }

// snapshotsRefused is how many snapshots from peers the member refused
// because their configuration lacked it, over all its incarnations.
func (n *node) snapshotsRefused() int { return n.counted(member.SnapshotsRefused) }

// now is the member's clock reading, what the core is told.
func (n *node) now() time.Duration { return time.Duration(n.clk.read(n.s.sch.now)) }

// start (re)starts a member from its durable state.
func (s *sim) start(n *node) {
	n.incarnation++
	n.down, n.stopped, n.paused, n.saving = false, false, false, false
	n.inbox = nil
	n.clk = newSimClock(s.sch.now)
	if n.incarnation > 1 {
		s.stats.Restarts++
	}
	if err := n.disk.Open(s.voters()); err != nil {
		s.die(n, fmt.Sprintf("node %d: restart: %v", n.id, err))
		return
	}
	n.metrics = &member.Tally{}
	cfg := member.Config{
		ID: n.id, Storage: n.disk.MemoryStorage, ElectionTicks: 10, HeartbeatTicks: 1, Metrics: n.metrics,
		SnapshotEvery: s.cfg.SnapshotEvery, SnapshotKeep: s.cfg.SnapshotKeep,
		// A big table would otherwise snapshot rarely (the log since the
		// last snapshot must be as big as the table), and big snapshots
		// meeting faults is what a run with held locks is for.
		SnapshotByEntries: s.cfg.Held > 0, MaxUncommitted: s.cfg.MaxUncommitted,
		// Snapshots are kept as a base and deltas, as node's pebble store
		// keeps them (snapshotData).
		DeltaSnapshots: true,
		Bug:            s.cfg.Bug, Journal: true, Logger: discard, SeqStart: n.incarnation << 40,
	}
	var core *member.Core
	err := s.protect(n, "restart", func() error {
		var err error
		core, err = member.New(cfg, n.now())
		return err
	})
	if err != nil {
		return
	}
	n.core = core
	if s.tr.on() {
		s.tr.printf("start node=%d incarnation=%d", n.id, n.incarnation)
	}
	if core.Removed() {
		// Its own snapshot covers its removal: it stops at once, as
		// raftlock node does.
		s.stopRemoved(n, "its snapshot covers its removal")
		return
	}
	// Members' tickers are not in phase: the first tick comes anywhere
	// within one interval.
	s.scheduleTickAfter(n, 1+s.rngMisc.Int64N(n.clk.interval(int64(s.cfg.Tick))))
	s.drain(n)
}

// protect calls into a member, turning a panic or an error into its death:
// the member is reported in Crashes and stays down.
func (s *sim) protect(n *node, what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
			s.die(n, fmt.Sprintf("node %d: %s: panic: %v", n.id, what, r))
		}
	}()
	if err := fn(); err != nil {
		s.die(n, fmt.Sprintf("node %d: %s: %v", n.id, what, err))
		return err
	}
	return nil
}

// die marks a member dead for the rest of the run.
func (s *sim) die(n *node, why string) {
	if s.tr.on() {
		s.tr.printf("DEAD %s", why)
	}
	s.res.Crashes = append(s.res.Crashes, why)
	s.lose(n)
	n.dead = true
}

// lose ends a member's process: its core is gone, its clients' connections
// break.
func (s *sim) lose(n *node) {
	for c := range member.NumCounters {
		n.past[c] = n.counted(c)
	}
	n.metrics = nil
	n.core = nil
	n.saving, n.paused = false, false
	n.inbox = nil
	n.tickGen++
	n.onSnapshot = nil
	n.onCommit = nil
	for _, h := range slices.Sorted(maps.Keys(n.handles)) {
		a := n.handles[h]
		delete(n.handles, h)
		s.toClient(n, func() { a.c.broken(a) })
	}
	s.loseAdmin(n)
}

// crash kills a member: with powerLoss its disk loses a random prefix of
// the writes not yet synced, else (SIGKILL) keeps them all.
func (s *sim) crash(n *node, powerLoss bool) {
	if n.core == nil && !n.stopped {
		return
	}
	if powerLoss {
		kept, lost := n.disk.Crash(s.rngDisk)
		s.stats.LostWrites += lost
		if s.tr.on() {
			s.tr.printf("crash node=%d power-loss kept=%d lost=%d", n.id, kept, lost)
		}
	} else {
		n.disk.Kill()
		if s.tr.on() {
			s.tr.printf("kill node=%d", n.id)
		}
	}
	s.lose(n)
	n.down, n.stopped = true, false
}

// stop handles an injected I/O error: the member answers what it can and
// stops. After a failed fsync nothing unsynced can be trusted to reach the
// disk (the kernel may drop the dirty pages), so its disk is left as a
// power loss leaves it: what was synced, and a random prefix of the rest.
func (s *sim) stop(n *node, err error) {
	if !errors.Is(err, errInjected) {
		s.die(n, fmt.Sprintf("node %d: %v", n.id, err))
		return
	}
	s.stats.IOErrors++
	if s.tr.on() {
		s.tr.printf("stop node=%d err=%q", n.id, err)
	}
	core := n.core
	var answers []member.Answer
	s.protect(n, "stop", func() error {
		core.Stop()
		answers = core.TakeAnswers()
		return nil
	})
	s.answer(n, answers)
	kept, lost := n.disk.Crash(s.rngDisk)
	s.stats.LostWrites += lost
	if s.tr.on() {
		s.tr.printf("stopped node=%d kept=%d lost=%d", n.id, kept, lost)
	}
	s.lose(n)
	n.stopped = true
	fault.Kill{Nodes: []int{int(n.id)}}.Record(s)
}

// scheduleTick arranges the member's next tick at its clock's next tick
// instant; a clock change reschedules it.
func (s *sim) scheduleTick(n *node) {
	s.scheduleTickAfter(n, n.clk.interval(int64(s.cfg.Tick)))
}

func (s *sim) scheduleTickAfter(n *node, d int64) {
	n.tickGen++
	gen := n.tickGen
	s.sch.after(d, func() {
		if gen != n.tickGen || !n.up() {
			return
		}
		s.scheduleTick(n)
		if n.paused {
			return // a stopped process misses its ticks
		}
		s.input(n, input{kind: inTick})
	})
}

// input is one thing a member is handed.
type input struct {
	kind   inputKind
	msg    *raftpb.Message  // inStep
	req    member.Request   // inSubmit
	reqs   []member.Request // inSubmits
	handle uint64           // inAbandon
	token  uint64           // inAbandon
	key    string           // inAbandon
	peer   uint64           // inSnapReport, inUnreachable
	failed bool             // inSnapReport
	call   func(*member.Core)
}

type inputKind uint8

const (
	inTick inputKind = iota
	inStep
	inSubmit
	inSubmits
	inAbandon
	inSnapReport
	inUnreachable
	inCall // call: the driver calls into the core (membership.go)
)

// input hands a member one input: now, or after its pause or slow sync.
func (s *sim) input(n *node, in input) {
	if !n.up() {
		return
	}
	if n.paused {
		n.inbox = append(n.inbox, in)
		return
	}
	s.process(n, in)
}

// process runs one input and then every Ready it produced.
func (s *sim) process(n *node, in input) {
	inc := n.incarnation
	err := s.protect(n, "input", func() error {
		c := n.core
		switch in.kind {
		case inTick:
			if s.tr.on() {
				s.tr.printf("tick node=%d local=%d", n.id, n.now())
			}
			c.Tick(n.now())
		case inStep:
			err := c.Step(in.msg)
			if err != nil && s.tr.on() {
				s.tr.printf("refused node=%d %v: %v", n.id, in.msg.GetType(), err)
			}
			if errors.Is(err, member.ErrCommitBeyondLog) {
				// The simulator forges nothing: the member lost entries it
				// had acknowledged (raft itself would have panicked here),
				// and protect reports it dead.
				return err
			}
		case inSubmit:
			c.Submit(n.now(), in.req)
		case inSubmits:
			for _, r := range in.reqs {
				c.Submit(n.now(), r)
			}
		case inAbandon:
			c.Abandon(in.handle, in.key, in.token)
		case inSnapReport:
			c.ReportSnapshot(in.peer, in.failed)
		case inUnreachable:
			c.ReportUnreachable(in.peer)
		case inCall:
			in.call(c)
		}
		return nil
	})
	if err == nil && inc == n.incarnation && n.up() {
		s.drain(n)
	}
}

// resume feeds a member the inputs it held.
func (s *sim) resume(n *node) {
	for len(n.inbox) > 0 && n.up() && !n.paused {
		in := n.inbox[0]
		n.inbox = n.inbox[1:]
		s.process(n, in)
	}
}

// drain handles every Ready the member has, in the order member.Ready
// documents.
func (s *sim) drain(n *node) {
	for n.up() && !n.saving && !n.paused {
		has := false
		if s.protect(n, "HasReady", func() error { has = n.core.HasReady(); return nil }) != nil {
			return
		}
		if !has {
			if n.core.Removed() {
				// raftlock node stops a member once it applied its own
				// removal (a leader too: raft does not step it down).
				s.stopRemoved(n, "it applied its own removal")
			}
			return
		}
		var rd member.Ready
		if s.protect(n, "Ready", func() error { rd = n.core.Ready(n.now()); return nil }) != nil {
			return
		}
		s.handleReady(n, rd)
	}
	s.resume(n)
}

// handleReady carries out one Ready in the order member.Ready documents
// (member.Ready.Start and Finish); its write may be slow.
func (s *sim) handleReady(n *node, rd member.Ready) {
	sc := simCarrier{s, n}
	if ok, _ := rd.Start(sc); !ok {
		return
	}
	// the write, maybe slow
	var slow int64
	if rd.Writes() {
		fail := n.ioErr > 0 && s.rngDisk.Float64() < n.ioErr
		if rd.Sync && n.slowSync > 0 && s.rngDisk.Float64() < n.slowSync {
			slow = 1 + s.rngDisk.Int64N(n.slowMax)
		}
		if err := n.disk.Save(rd.HardState, rd.Entries, rd.Snapshot, rd.Sync, slow > 0, fail); err != nil {
			s.stop(n, fmt.Errorf("save: %w", err))
			return
		}
		if rd.Snapshot != nil {
			s.stats.Installed++
			n.installed++
			if n.onSnapshot != nil {
				n.onSnapshot(true)
			}
		}
		if s.tr.on() {
			s.tr.printf("save node=%d hs=%v entries=%d snap=%d sync=%v slow=%dus",
				n.id, rd.HardState != nil, len(rd.Entries), rd.Snapshot.GetMetadata().GetIndex(), rd.Sync, slow/1000)
		}
	}
	if slow == 0 {
		rd.Finish(sc)
		return
	}
	// The member is in fsync: its acknowledgements, answers and next Ready
	// wait for it; calls, messages and ticks are taken meanwhile.
	s.stats.SlowSyncs++
	n.saving = true
	inc := n.incarnation
	s.sch.after(slow, func() {
		if n.incarnation != inc || !n.up() {
			return
		}
		n.disk.Synced()
		if s.tr.on() {
			s.tr.printf("fsync node=%d done", n.id)
		}
		n.saving = false
		rd.Finish(sc)
		if n.up() {
			s.drain(n)
		}
	})
}

// simCarrier carries out a simulated member's Readies (member.Carrier):
// the applied entries feed the one global log, the compaction is stored
// at once, messages go through the simulated network.
type simCarrier struct {
	s *sim
	n *node
}

func (sc simCarrier) Journal(applied []member.AppliedEntry) bool {
	s, n := sc.s, sc.n
	s.recordApplied(n, applied)
	if s.tr.on() {
		s.tr.printf("applied node=%d %d..%d", n.id, applied[0].Index, applied[len(applied)-1].Index)
	}
	return true
}

func (sc simCarrier) Compact(c *member.Compaction) error {
	s, n := sc.s, sc.n
	fail := n.ioErr > 0 && s.rngDisk.Float64() < n.ioErr
	cur, _ := n.disk.MemoryStorage.Snapshot()
	if err := n.disk.Compact(c.Index, c.ConfState, snapshotData(cur, c), c.CompactTo, fail); err != nil {
		err = fmt.Errorf("compact at %d: %w", c.Index, err)
		s.stop(n, err)
		return err
	}
	s.stats.Snapshots++
	if s.tr.on() {
		s.tr.printf("compact node=%d index=%d compact-to=%d", n.id, c.Index, c.CompactTo)
	}
	if n.onSnapshot != nil {
		n.onSnapshot(false)
	}
	return nil
}

// Hold implements member.Holder: an aimed fault (onCommit) may crash the
// member before anything of rd leaves it.
func (sc simCarrier) Hold(rd member.Ready) bool {
	return sc.n.onCommit != nil && sc.n.onCommit(rd)
}

func (sc simCarrier) Send(msgs []*raftpb.Message) { sc.s.sendAll(sc.n, msgs) }

func (sc simCarrier) Answer(answers []member.Answer) { sc.s.answer(sc.n, answers) }

// Advance implements member.Carrier; a member that went down meanwhile
// does not advance.
func (sc simCarrier) Advance() error {
	if !sc.n.up() {
		return nil
	}
	return sc.s.protectAdvance(sc.n)
}

func (s *sim) protectAdvance(n *node) error {
	var adv error
	err := s.protect(n, "Advance", func() error { adv = n.core.Advance(n.now()); return nil })
	if err != nil {
		return err
	}
	if adv != nil {
		s.stop(n, fmt.Errorf("advance: %w", adv))
		return adv
	}
	return nil
}

func (s *sim) sendAll(n *node, msgs []*raftpb.Message) {
	for _, m := range msgs {
		s.send(n, m)
	}
}

// answer sends the member's answers back to the clients that asked.
func (s *sim) answer(n *node, answers []member.Answer) {
	for i := range answers {
		a := answers[i]
		if fn, ok := n.admin[a.Handle]; ok {
			delete(n.admin, a.Handle)
			s.toClient(n, func() { fn(a) })
			continue
		}
		at, ok := n.handles[a.Handle]
		if !ok {
			continue
		}
		delete(n.handles, a.Handle)
		if s.tr.on() {
			s.tr.printf("answer node=%d handle=%d token=%d err=%v", n.id, a.Handle, a.Token, a.Err)
		}
		s.toClient(n, func() { at.c.answered(at, a) })
	}
}

// restartStopped restarts every member that is down but can come back.
func (s *sim) restartStopped() {
	var started []int
	for _, n := range s.nodes {
		if n.restartable() {
			s.start(n)
			started = append(started, int(n.id))
		}
	}
	if len(started) > 0 {
		fault.Start{Nodes: started}.Record(s)
	}
}

// leader is the member that is up and leads in the highest term, or nil.
func (s *sim) leader() *node {
	var best *node
	var term uint64
	for _, n := range s.nodes {
		if !n.up() {
			continue
		}
		if st, ok := s.status(n); ok && st.Role == "leader" && st.Term >= term {
			best, term = n, st.Term
		}
	}
	return best
}

// leaderStatus is the leader and its status; false when no member leads.
func (s *sim) leaderStatus() (*node, member.Status, bool) {
	l := s.leader()
	if l == nil {
		return nil, member.Status{}, false
	}
	st, ok := s.status(l)
	return l, st, ok
}

// status is the member's status; false if it is down (or dies asking).
func (s *sim) status(n *node) (member.Status, bool) {
	var st member.Status
	if !n.up() {
		return st, false
	}
	err := s.protect(n, "Status", func() error { st = n.core.Status(); return nil })
	return st, err == nil
}

// snapshotData is the data a member's store keeps for compaction c, as
// node's pebble store decides it (logstore.Disk.CompactFrom): the chain
// the store holds with c's delta appended, when that chain ends at c's
// base and stays under c's bounds with it; otherwise a chain of a new
// base. One difference: the store here also appends to a chain it
// received from a leader (its parts are segments like its own), where
// logstore starts a new base, so a run exercises more deltas, not fewer.
func snapshotData(cur *raftpb.Snapshot, c *member.Compaction) []byte {
	if c.Changes == nil || cur.GetMetadata().GetIndex() != c.Base || !snapchain.Is(cur.GetData()) {
		return snapchain.Join(c.Data())
	}
	parts, err := snapchain.Split(cur.GetData())
	if err != nil || len(parts) >= c.MaxParts {
		return snapchain.Join(c.Data())
	}
	var deltas uint64
	for _, p := range parts[1:] {
		deltas += uint64(len(p))
	}
	if deltas >= c.MaxDeltaBytes {
		return snapchain.Join(c.Data())
	}
	var delta bytes.Buffer
	c.WriteDeltaTo(&delta, nil) // a bytes.Buffer does not fail
	return snapchain.Join(append(parts, delta.Bytes())...)
}

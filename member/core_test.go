package member

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/fsm"
)

// testCluster drives a few Cores in-process, deterministically: it ticks
// only the members a test names, carries messages in FIFO order, and does
// what each Ready says in the documented order (journal, compaction,
// send-before-persist, save to raft.MemoryStorage, send, answers, Advance).
type testCluster struct {
	t       *testing.T
	ids     []uint64
	cores   map[uint64]*Core
	stores  map[uint64]*raft.MemoryStorage
	cfgs    map[uint64]Config
	now     time.Duration
	net     []*raftpb.Message
	down    map[uint64]bool                // messages to or from it are lost
	drop    func(m *raftpb.Message) bool   // other losses
	answers map[uint64]map[uint64]Answer   // member → handle → answer
	journal map[uint64][]AppliedEntry      // member → applied entries
	onReady func(id uint64, ev readyEvent) // observes each Ready
}

// readyEvent is one Ready as the driver saw it, with the member's applied
// index before Ready, after Ready and after Advance.
type readyEvent struct {
	rd                              Ready
	appliedBefore, appliedAtReady   uint64
	appliedAfterAdvance             uint64
	storedCommitAfter, raftCommitAt uint64
}

func newCluster(t *testing.T, n int, mod func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, cores: map[uint64]*Core{}, stores: map[uint64]*raft.MemoryStorage{},
		cfgs: map[uint64]Config{}, down: map[uint64]bool{}, answers: map[uint64]map[uint64]Answer{},
		journal: map[uint64][]AppliedEntry{}}
	for i := 1; i <= n; i++ {
		c.ids = append(c.ids, uint64(i))
	}
	for _, id := range c.ids {
		ms := raft.NewMemoryStorage()
		boot := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
			ConfState: &raftpb.ConfState{Voters: slices.Clone(c.ids)}, Index: new(uint64(0)), Term: new(uint64(0))}}
		if err := ms.ApplySnapshot(boot); err != nil {
			t.Fatal(err)
		}
		cfg := Config{ID: id, Storage: ms, Journal: true}
		if mod != nil {
			mod(&cfg)
		}
		c.stores[id], c.cfgs[id] = ms, cfg
		c.start(id)
	}
	return c
}

// start (re)starts member id from what its store holds.
func (c *testCluster) start(id uint64) {
	c.t.Helper()
	core, err := New(c.cfgs[id], c.now)
	if err != nil {
		c.t.Fatalf("start member %d: %v", id, err)
	}
	c.cores[id] = core
	if c.answers[id] == nil {
		c.answers[id] = map[uint64]Answer{}
	}
}

// handle does one Ready of member id, if it has one.
func (c *testCluster) handle(id uint64) bool {
	c.t.Helper()
	core := c.cores[id]
	if !core.HasReady() {
		return false
	}
	var ev readyEvent
	ev.appliedBefore = core.Applied()
	rd := core.Ready(c.now)
	ev.rd, ev.appliedAtReady = rd, core.Applied()
	if err := rd.Carry(clusterCarrier{c, id}); err != nil {
		c.t.Fatalf("member %d: %v", id, err)
	}
	// The core checks its invariants itself only in a build with the
	// invariants tag; its tests check them after every Ready in any.
	if err := core.lm.violation(leaseChecks); err != nil && !core.lm.planted {
		c.t.Fatalf("member %d: invariant violated: %v", id, err)
	}
	ev.appliedAfterAdvance = core.Applied()
	hs, _, _ := c.stores[id].InitialState()
	ev.storedCommitAfter = hs.GetCommit()
	ev.raftCommitAt = core.Status().Commit
	if c.onReady != nil {
		c.onReady(id, ev)
	}
	return true
}

// clusterCarrier carries out member id's Readies in the test cluster
// (member.Ready.Carry): its store is a raft.MemoryStorage, its network the
// cluster's FIFO queue.
type clusterCarrier struct {
	c  *testCluster
	id uint64
}

func (cc clusterCarrier) Journal(applied []AppliedEntry) bool {
	cc.c.journal[cc.id] = append(cc.c.journal[cc.id], applied...)
	return true
}

func (cc clusterCarrier) Compact(cp *Compaction) error {
	ms := cc.c.stores[cc.id]
	if _, err := ms.CreateSnapshot(cp.Index, cp.ConfState, cp.Data()); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
		return fmt.Errorf("store snapshot at %d: %w", cp.Index, err)
	}
	if err := ms.Compact(cp.CompactTo); err != nil && !errors.Is(err, raft.ErrCompacted) {
		return fmt.Errorf("compact to %d: %w", cp.CompactTo, err)
	}
	return nil
}

func (cc clusterCarrier) Send(msgs []*raftpb.Message) { cc.c.send(msgs) }

func (cc clusterCarrier) Save(rd Ready) error {
	ms := cc.c.stores[cc.id]
	if rd.Snapshot != nil {
		if err := ms.ApplySnapshot(proto.Clone(rd.Snapshot).(*raftpb.Snapshot)); err != nil {
			return fmt.Errorf("save snapshot: %w", err)
		}
	}
	if rd.HardState != nil {
		if err := ms.SetHardState(proto.Clone(rd.HardState).(*raftpb.HardState)); err != nil {
			return err
		}
	}
	if err := ms.Append(rd.Entries); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	return nil
}

func (cc clusterCarrier) Answer(answers []Answer) {
	got := cc.c.answers[cc.id]
	for _, a := range answers {
		if prev, ok := got[a.Handle]; ok {
			cc.c.t.Errorf("member %d answered handle %d twice: %+v then %+v", cc.id, a.Handle, prev, a)
		}
		got[a.Handle] = a
	}
}

func (cc clusterCarrier) Advance() error {
	if err := cc.c.cores[cc.id].Advance(cc.c.now); err != nil {
		return fmt.Errorf("advance: %w", err)
	}
	return nil
}

// counted is counter k of a core whose meter is its private Tally.
func counted(core *Core, k Counter) uint64 { return core.metrics.(*Tally).Count(k) }

func (c *testCluster) send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		c.net = append(c.net, proto.Clone(m).(*raftpb.Message))
	}
}

func (c *testCluster) lost(m *raftpb.Message) bool {
	_, known := c.cores[m.GetTo()]
	return !known || c.down[m.GetTo()] || c.down[m.GetFrom()] || (c.drop != nil && c.drop(m))
}

// deliver steps every message in flight into its receiver; it returns
// whether there were any.
func (c *testCluster) deliver(only func(m *raftpb.Message) bool) bool {
	var keep, now []*raftpb.Message
	for _, m := range c.net {
		if only == nil || only(m) {
			now = append(now, m)
		} else {
			keep = append(keep, m)
		}
	}
	c.net = keep
	for _, m := range now {
		if c.lost(m) {
			continue
		}
		if err := c.cores[m.GetTo()].Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			c.t.Fatalf("member %d refused %s from %d: %v", m.GetTo(), m.GetType(), m.GetFrom(), err)
		}
	}
	return len(now) > 0
}

// settle does Readies and delivers messages until nothing moves.
func (c *testCluster) settle() {
	c.t.Helper()
	for range 10000 {
		progress := false
		for _, id := range c.ids {
			for c.handle(id) {
				progress = true
			}
		}
		if c.deliver(nil) {
			progress = true
		}
		if !progress {
			return
		}
	}
	c.t.Fatal("cluster does not settle")
}

// tick advances the clock by 10ms, ticks the named members, and settles.
func (c *testCluster) tick(ids ...uint64) {
	c.now += 10 * ms
	for _, id := range ids {
		c.cores[id].Tick(c.now)
	}
	c.settle()
}

// elect ticks member id alone until it leads and may decide.
func (c *testCluster) elect(id uint64) {
	c.t.Helper()
	for range 100 {
		c.tick(id)
		if _, self := c.cores[id].Leader(); self && c.cores[id].CanDecide() == nil {
			return
		}
	}
	c.t.Fatalf("member %d did not become a ready leader: %+v", id, c.cores[id].Status())
}

func (c *testCluster) submit(id uint64, r Request) {
	c.cores[id].Submit(c.now, r)
	c.settle()
}

// answer returns member id's answer to handle.
func (c *testCluster) answer(id, handle uint64) Answer {
	c.t.Helper()
	a, ok := c.answers[id][handle]
	if !ok {
		c.t.Fatalf("member %d has not answered handle %d", id, handle)
	}
	return a
}

// call submits r to member id and describes its answer.
func (c *testCluster) call(id uint64, r Request) string {
	c.t.Helper()
	c.submit(id, r)
	return describeAnswer(r.Op, c.answer(id, r.Handle))
}

func describeAnswer(op Op, a Answer) string {
	switch {
	case a.Err != nil:
		return errName(a.Err)
	case op == OpAcquire:
		return fmt.Sprintf("token %d", a.Token)
	case op == OpGet && a.Lock.Held:
		return fmt.Sprintf("held by %d, %dms left", a.Lock.Token, a.Lock.RemainingMS)
	case op == OpGet:
		return "free"
	case a.Unchanged:
		return "ok (already)"
	case op == OpBackup:
		return fmt.Sprintf("backup: %d locks, last token %d", a.Backup.Table.Len(), a.Backup.Table.LastToken())
	}
	return "ok"
}

// logged returns every command in member id's stored log.
func (c *testCluster) logged(id uint64) []fsm.Command {
	c.t.Helper()
	ms := c.stores[id]
	first, _ := ms.FirstIndex()
	last, _ := ms.LastIndex()
	if last < first {
		return nil
	}
	ents, err := ms.Entries(first, last+1, 1<<30)
	if err != nil {
		c.t.Fatal(err)
	}
	var cmds []fsm.Command
	for _, e := range ents {
		if e.GetType() != raftpb.EntryType_EntryNormal || len(e.GetData()) == 0 {
			continue
		}
		envs, err := fsm.DecodeBatch(e.GetData())
		if err != nil {
			c.t.Fatal(err)
		}
		for _, env := range envs {
			cmds = append(cmds, env.Cmd)
		}
	}
	return cmds
}

func acquire(handle uint64, key string) Request {
	return Request{Handle: handle, Op: OpAcquire, Key: key, Lease: time.Second}
}

func TestSingleMemberElectsItselfAndServes(t *testing.T) {
	c := newCluster(t, 1, nil)
	if err := c.cores[1].CanDecide(); err == nil {
		t.Fatal("a member that never led may decide")
	}
	c.check("acquire before the election", c.call(1, acquire(1, "k")), "NotLeader(0)")
	c.elect(1)
	c.check("acquire", c.call(1, acquire(2, "k")), "token 1")
	c.check("try-acquire of a held key", c.call(1, acquire(3, "k")), "Held")
	c.check("get", c.call(1, Request{Handle: 4, Op: OpGet, Key: "k"}), "held by 1, 1000ms left")
	c.check("release by another token", c.call(1, Request{Handle: 5, Op: OpRelease, Key: "k", Token: 9}), "NotFound")
	c.check("renew", c.call(1, Request{Handle: 6, Op: OpRenew, Key: "k", Token: 1, Lease: 2 * time.Second}), "ok")
	c.check("release", c.call(1, Request{Handle: 7, Op: OpRelease, Key: "k", Token: 1}), "ok")
	c.check("get after release", c.call(1, Request{Handle: 8, Op: OpGet, Key: "k"}), "free")
	c.check("acquire again", c.call(1, acquire(9, "k")), "token 2")
	st := c.cores[1].Status()
	if st.Role != "leader" || st.Leader != 1 || st.LastToken != 2 || st.Locks != 1 || st.Applied != st.Commit {
		t.Fatalf("status %+v", st)
	}
	if err := c.cores[1].Healthy(); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	// Journal: every applied entry, in order, with its results.
	var idx []uint64
	var granted []uint64
	for _, e := range c.journal[1] {
		idx = append(idx, e.Index)
		for _, lc := range e.Commands {
			if lc.Status == "Granted" {
				granted = append(granted, lc.Token)
			}
		}
	}
	for i, x := range idx {
		if x != uint64(i+1) {
			t.Fatalf("journal indexes %v, want 1..%d", idx, len(idx))
		}
	}
	if !slices.Equal(granted, []uint64{1, 2}) || uint64(len(idx)) != st.Applied {
		t.Fatalf("journal grants %v over %d entries, applied %d", granted, len(idx), st.Applied)
	}
}

func (c *testCluster) check(what, got, want string) {
	c.t.Helper()
	check(c.t, what, got, want)
}

func TestThreeMembersElectReplicateAndAnswer(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	for _, id := range []uint64{2, 3} {
		if lead, self := c.cores[id].Leader(); lead != 1 || self {
			t.Fatalf("member %d follows %d (self %v)", id, lead, self)
		}
	}
	c.check("acquire k", c.call(1, acquire(1, "k")), "token 1")
	c.check("acquire j", c.call(1, acquire(2, "j")), "token 2")
	c.check("follower redirects", c.call(2, acquire(3, "x")), "NotLeader(1)")
	c.check("follower redirects a get", c.call(3, Request{Handle: 4, Op: OpGet, Key: "k"}), "NotLeader(1)")
	// The leader sends the new commit index at once (no tick): the
	// followers applied at the same local time.
	c.check("follower's stale get", c.call(2, Request{Handle: 5, Op: OpGet, Key: "k", Stale: true}), "held by 1, 1000ms left")
	want := c.cores[1].Status()
	for _, id := range []uint64{2, 3} {
		st := c.cores[id].Status()
		if st.Applied != want.Applied || st.Digest != want.Digest || st.LastToken != 2 {
			t.Fatalf("member %d at %d digest %s token %d, leader at %d digest %s", id, st.Applied, st.Digest, st.LastToken, want.Applied, want.Digest)
		}
	}
	// A waiter on the leader is granted when the holder releases.
	c.submit(1, Request{Handle: 6, Op: OpAcquire, Key: "k", Lease: time.Second, Wait: time.Minute})
	if c.cores[1].Waiters("k") != 1 {
		t.Fatal("waiting acquire not queued")
	}
	c.check("release", c.call(1, Request{Handle: 7, Op: OpRelease, Key: "k", Token: 1}), "ok")
	c.check("waiter granted", describeAnswer(OpAcquire, c.answer(1, 6)), "token 3")
}

// A command decided in a term the member no longer leads in is answered
// Unavailable and never reaches the log: a leadership transfer deposes the
// leader between the decision and the next Ready.
func TestCommandDecidedBeforeSteppingDownIsNotProposed(t *testing.T) {
	for _, noBatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("nobatch=%v", noBatch), func(t *testing.T) {
			c := newCluster(t, 3, func(cfg *Config) { cfg.NoBatch = noBatch })
			c.elect(1)
			term := c.cores[1].Status().Term
			// Member 1 hands leadership to 2: 2 campaigns at once.
			if err := c.cores[1].Step(&raftpb.Message{Type: raftpb.MsgTransferLeader.Enum(), From: new(uint64(2)), To: new(uint64(1))}); err != nil {
				t.Fatal(err)
			}
			c.handle(1)
			c.deliver(func(m *raftpb.Message) bool { return m.GetType() == raftpb.MsgTimeoutNow })
			c.handle(2) // 2's votes are in flight
			// Member 1's lock manager still leads: it decides.
			c.cores[1].Submit(c.now, acquire(1, "k"))
			c.cores[1].Submit(c.now, acquire(2, "j"))
			// 2's vote request deposes 1 before its next Ready.
			c.deliver(func(m *raftpb.Message) bool { return m.GetType() == raftpb.MsgVote && m.GetTo() == 1 })
			if _, self := c.cores[1].Leader(); !self {
				t.Fatal("the core learnt of the step-down before its Ready")
			}
			c.settle()
			if lead, _ := c.cores[1].Leader(); lead != 2 || c.cores[1].Status().Term != term+1 {
				t.Fatalf("member 1 follows %d in term %d, want 2 in %d", lead, c.cores[1].Status().Term, term+1)
			}
			for _, id := range c.ids {
				if cmds := c.logged(id); len(cmds) != 0 {
					t.Fatalf("member %d logged %v", id, cmds)
				}
			}
			got := describeAnswer(OpAcquire, c.answer(1, 1)) + ", " + describeAnswer(OpAcquire, c.answer(1, 2))
			c.check("answers", got, "Unavailable, Unavailable")
			c.tick(2)
			c.check("new leader grants the key", c.call(2, acquire(3, "k")), "token 1")
		})
	}
}

// raft refuses proposals during a leadership transfer: the request is
// answered Unavailable (Drop), not left hanging.
func TestProposalRefusedByRaftAnswersUnavailable(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	c.down[2] = true // the transfer cannot finish
	if err := c.cores[1].Step(&raftpb.Message{Type: raftpb.MsgTransferLeader.Enum(), From: new(uint64(2)), To: new(uint64(1))}); err != nil {
		t.Fatal(err)
	}
	c.check("acquire during the transfer", c.call(1, acquire(1, "k")), "Unavailable")
	c.check("waiters behind it too", c.call(1, Request{Handle: 2, Op: OpAcquire, Key: "k", Lease: time.Second, Wait: time.Minute}), "Unavailable")
	if cmds := c.logged(1); len(cmds) != 0 {
		t.Fatalf("logged %v", cmds)
	}
}

// Rule 9 and liveness: a quorum read never hangs. On a leader cut off from
// its followers it ends Unavailable within three election timeouts.
func TestReadOnLeaderThatLosesItsQuorum(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	c.call(1, acquire(1, "k"))
	c.down[1] = true
	c.submit(1, Request{Handle: 2, Op: OpGet, Key: "k"})
	if a, ok := c.answers[1][2]; ok {
		t.Fatalf("answered %s without a quorum", describeAnswer(OpGet, a))
	}
	const limit = 3 * 10 // ElectionTicks defaults to 10
	for i := 1; i <= limit; i++ {
		if _, ok := c.answers[1][2]; ok {
			break
		}
		c.tick(1)
	}
	a, ok := c.answers[1][2]
	if !ok {
		t.Fatalf("read unanswered after %d ticks", limit)
	}
	c.check("read", describeAnswer(OpGet, a), "Unavailable")
}

// The read timer itself: a leader that keeps its quorum (its appends are
// acknowledged) but never hears the heartbeat acknowledgements that confirm
// a read gives up on it after exactly 3 election timeouts.
func TestReadUnconfirmedFor3ElectionTimeoutsIsUnavailable(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	c.drop = func(m *raftpb.Message) bool { return m.GetType() == raftpb.MsgHeartbeatResp }
	c.submit(1, Request{Handle: 1, Op: OpGet, Key: "k"})
	const timeout = 3 * 10 // ElectionTicks defaults to 10
	for i := 1; i <= timeout; i++ {
		// Appends keep the followers counted as active (CheckQuorum).
		c.submit(1, acquire(uint64(100+i), fmt.Sprintf("keepalive-%d", i)))
		if _, ok := c.answers[1][1]; ok {
			t.Fatalf("read answered %s after %d ticks", describeAnswer(OpGet, c.answers[1][1]), i-1)
		}
		c.tick(1)
		if _, self := c.cores[1].Leader(); !self {
			t.Fatal("leader lost its quorum; the test needs it to keep leading")
		}
	}
	c.check("after 3 election timeouts", describeAnswer(OpGet, c.answer(1, 1)), "Unavailable")
}

func TestReadyTwiceWithoutAdvancePanics(t *testing.T) {
	c := newCluster(t, 1, nil)
	core := c.cores[1]
	for range 100 {
		if core.HasReady() {
			break
		}
		c.now += 10 * ms
		core.Tick(c.now)
	}
	if !core.HasReady() {
		t.Fatal("no Ready")
	}
	core.Ready(c.now)
	if core.HasReady() {
		t.Fatal("HasReady before Advance")
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "without Advance") {
				t.Fatalf("second Ready: recovered %v, want a panic about Advance", r)
			}
		}()
		core.Ready(c.now)
	}()
}

// peerTypes lists every raft message type and whether a peer may send it;
// a type added to raft fails the test until it is listed here.
var peerTypes = map[raftpb.MessageType]bool{
	raftpb.MsgHup: false, raftpb.MsgBeat: false, raftpb.MsgProp: false,
	raftpb.MsgApp: true, raftpb.MsgAppResp: true, raftpb.MsgVote: true, raftpb.MsgVoteResp: true,
	raftpb.MsgSnap: true, raftpb.MsgHeartbeat: true, raftpb.MsgHeartbeatResp: true,
	raftpb.MsgUnreachable: false, raftpb.MsgSnapStatus: false, raftpb.MsgCheckQuorum: false,
	raftpb.MsgTransferLeader: true, raftpb.MsgTimeoutNow: true, raftpb.MsgReadIndex: true,
	raftpb.MsgReadIndexResp: true, raftpb.MsgPreVote: true, raftpb.MsgPreVoteResp: true,
	raftpb.MsgStorageAppend: false, raftpb.MsgStorageAppendResp: false, raftpb.MsgStorageApply: false,
	raftpb.MsgStorageApplyResp: false, raftpb.MsgForgetLeader: false,
}

// Step refuses the message types only a member sends itself (a forged
// MsgHup would start an election, a MsgProp would propose past the lock
// manager), with an error and without touching raft.
func TestStepRefusesLocalOnlyMessages(t *testing.T) {
	for v, name := range raftpb.MessageType_name {
		typ := raftpb.MessageType(v)
		allowed, listed := peerTypes[typ]
		if !listed {
			t.Errorf("%s: not listed in peerTypes", name)
			continue
		}
		if peerMessageAllowed(typ) != allowed {
			t.Errorf("%s: allowed=%v, want %v", name, !allowed, allowed)
		}
		if allowed {
			continue
		}
		for _, to := range []uint64{1, 2} { // the leader, a follower
			t.Run(name+fmt.Sprintf("/to_member_%d", to), func(t *testing.T) {
				c := newCluster(t, 3, nil)
				c.elect(1)
				before := c.cores[to].Status()
				data := fsm.EncodeBatch([]fsm.Envelope{{ID: fsm.RequestID{Node: 9, Seq: 1}, Cmd: fsm.Command{Op: fsm.OpGrant, Key: "k", LeaseMS: 1000}}})
				m := &raftpb.Message{Type: typ.Enum(), From: new(uint64(3)), To: new(to), Term: new(before.Term),
					Entries: []*raftpb.Entry{{Data: data}}}
				if err := c.cores[to].Step(m); err == nil {
					t.Fatal("accepted")
				}
				c.settle()
				if c.cores[to].HasReady() {
					t.Fatal("refused message left work for raft")
				}
				after := c.cores[to].Status()
				if !reflect.DeepEqual(after, before) {
					t.Fatalf("status changed: %+v -> %+v", before, after)
				}
				if cmds := c.logged(1); len(cmds) != 0 {
					t.Fatalf("logged %v", cmds)
				}
			})
		}
	}
}

// raft trusts its peers: a heartbeat whose commit index is past the
// receiver's log panics inside raft (raftLog.commitTo). Found by the chaos
// harness's garbage nemesis: without TLS a hello may claim the leader's id,
// and one forged heartbeat stopped every member. Step refuses it.
func TestForgedCommitIndexIsRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	st := c.cores[2].Status()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a forged heartbeat reached raft: %v", r)
		}
	}()
	err := c.cores[2].Step(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		Term: new(st.Term), Commit: new(st.Commit + 100)})
	if !errors.Is(err, ErrCommitBeyondLog) {
		t.Fatalf("Step: %v, want ErrCommitBeyondLog", err)
	}
	c.settle()
	c.check("acquire afterwards", c.call(1, acquire(1, "k")), "token 1")
}

// A read-index request as raft itself never sends one (no sender, no
// context entry) must not crash the leader. raft treats a message from 0 as
// its own and takes the context from Entries[0].
func TestStepMalformedReadIndexDoesNotCrashTheLeader(t *testing.T) {
	for _, to := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("to_member_%d", to), func(t *testing.T) {
			c := newCluster(t, 3, nil)
			c.elect(1)
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			_ = c.cores[to].Step(&raftpb.Message{Type: raftpb.MsgReadIndex.Enum(), To: new(to)})
			c.settle()
			c.tick(1)
			c.check("acquire afterwards", c.call(1, acquire(1, "k")), "token 1")
		})
	}
}

// fuzzedMessage decodes a fuzzed peer message and starts, for it, a
// three-member cluster led by member 1; m is nil when data is no message.
func fuzzedMessage(t *testing.T, data []byte) (m *raftpb.Message, c *testCluster) {
	m = &raftpb.Message{}
	if proto.Unmarshal(data, m) != nil {
		return nil, nil
	}
	c = newCluster(t, 3, nil)
	c.elect(1)
	return m, c
}

// FuzzStep: whatever bytes a peer sends, a member does not panic on a
// message it refuses, and a message of an older term (a delayed or
// replayed one; raft ignores or answers it) changes nothing: the cluster
// keeps its leader and still grants locks. Messages at the current term or
// higher are not forged here: raft panics on their impossible indexes (see
// TestForgedCommitIndexPanicsInsideRaft).
func FuzzStep(f *testing.F) {
	seed := func(m *raftpb.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(3)), Term: new(uint64(1)), Commit: new(uint64(99))})
	seed(&raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(3)), Term: new(uint64(1)), Index: new(uint64(5)),
		LogTerm: new(uint64(1)), Commit: new(uint64(7)), Entries: []*raftpb.Entry{{Index: new(uint64(6)), Term: new(uint64(1)), Data: []byte{1, 0}}}})
	seed(&raftpb.Message{Type: raftpb.MsgVote.Enum(), From: new(uint64(3)), Term: new(uint64(1)), Index: new(uint64(100)), LogTerm: new(uint64(9))})
	seed(&raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(3)), Term: new(uint64(1)),
		Snapshot: &raftpb.Snapshot{Data: []byte("junk"), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(50)), Term: new(uint64(1))}}})
	seed(&raftpb.Message{Type: raftpb.MsgHup.Enum(), From: new(uint64(3))})
	seed(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(uint64(3)), Entries: []*raftpb.Entry{{Data: []byte("x")}}})
	seed(&raftpb.Message{Type: raftpb.MsgReadIndex.Enum(), From: new(uint64(3)), Entries: []*raftpb.Entry{{Data: []byte("ctx")}}})
	seed(&raftpb.Message{Type: raftpb.MsgReadIndexResp.Enum(), From: new(uint64(1)), Index: new(uint64(1000)), Entries: []*raftpb.Entry{{Data: []byte{0, 0, 0, 0, 0, 0, 0, 1}}}})
	seed(&raftpb.Message{Type: raftpb.MsgTransferLeader.Enum(), From: new(uint64(99))})
	seed(&raftpb.Message{Type: raftpb.MsgStorageAppend.Enum(), From: new(uint64(3)), Term: new(uint64(5))})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, c := fuzzedMessage(t, data)
		if m == nil {
			return
		}
		// A second election: term 3, so that terms 1 and 2 are older.
		c.cores[1].Step(&raftpb.Message{Type: raftpb.MsgTransferLeader.Enum(), From: new(uint64(2)), To: new(uint64(1))})
		c.settle()
		c.cores[2].Step(&raftpb.Message{Type: raftpb.MsgTransferLeader.Enum(), From: new(uint64(1)), To: new(uint64(2))})
		c.settle()
		if _, self := c.cores[1].Leader(); !self {
			t.Fatalf("setup: member 1 does not lead: %+v", c.cores[1].Status())
		}
		term := c.cores[1].Status().Term
		termZeroOK := map[raftpb.MessageType]bool{raftpb.MsgReadIndex: true, raftpb.MsgReadIndexResp: true, raftpb.MsgTransferLeader: true}
		for _, to := range []uint64{1, 2} {
			m := proto.Clone(m).(*raftpb.Message)
			m.To = new(to)
			allowed := peerMessageAllowed(m.GetType())
			if allowed && !(m.GetTerm() > 0 && m.GetTerm() < term) && !(m.GetTerm() == 0 && termZeroOK[m.GetType()]) {
				continue // raft trusts peers at the current term and above
			}
			if m.GetType() == raftpb.MsgTransferLeader {
				continue // a legitimate transfer changes the leader
			}
			if m.GetType() == raftpb.MsgReadIndex && m.GetFrom() == 0 && len(m.GetEntries()) == 0 {
				continue // crashes the leader: TestStepMalformedReadIndexDoesNotCrashTheLeader
			}
			before := c.cores[to].Status()
			err := c.cores[to].Step(m)
			if !allowed && err == nil {
				t.Fatalf("member %d accepted %s", to, m.GetType())
			}
			c.settle()
			after := c.cores[to].Status()
			if after.Term != before.Term || after.Leader != before.Leader || after.Commit < before.Commit {
				t.Fatalf("member %d: %s of term %d changed %+v into %+v", to, m.GetType(), m.GetTerm(), before, after)
			}
		}
		c.check("acquire after the forged message", c.call(1, acquire(1, "k")), "token 1")
	})
}

// Compaction: after SnapshotEvery applied entries the Ready asks for a
// snapshot of the table at the applied index, keeping SnapshotKeep entries;
// a member restarted from the compacted store has the same table.
func TestCompactionEverySnapshotEveryEntries(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.SnapshotEvery, cfg.SnapshotKeep = 5, 2 })
	type comp struct{ index, compactTo uint64 }
	var got []comp
	c.onReady = func(id uint64, ev readyEvent) {
		cp := ev.rd.Compaction
		if cp == nil {
			return
		}
		got = append(got, comp{cp.Index, cp.CompactTo})
		m, _, _, err := DecodeSnapshot(cp.Data())
		if err != nil {
			t.Fatalf("compaction data: %v", err)
		}
		// The table at cp.Index: one lock per acquire applied so far
		// (entry 1 is the leader's empty entry).
		if m.Len() != int(cp.Index-1) || m.LastToken() != cp.Index-1 {
			t.Fatalf("snapshot at %d holds %d locks, last token %d", cp.Index, m.Len(), m.LastToken())
		}
		if !slices.Equal(cp.ConfState.GetVoters(), []uint64{1}) {
			t.Fatalf("conf state %v", cp.ConfState)
		}
	}
	c.elect(1) // index 1
	for i := uint64(1); i <= 11; i++ {
		c.check("acquire", c.call(1, acquire(i, fmt.Sprintf("k%02d", i))), fmt.Sprintf("token %d", i))
	}
	want := []comp{{5, 3}, {10, 8}}
	if !slices.Equal(got, want) {
		t.Fatalf("compactions %v, want %v", got, want)
	}
	if first, _ := c.stores[1].FirstIndex(); first != 9 {
		t.Fatalf("first index %d after compacting to 8", first)
	}
	before := c.cores[1].Status()
	c.start(1) // restart from the compacted store
	c.settle()
	after := c.cores[1].Status()
	if after.Applied != before.Applied || after.Digest != before.Digest || after.LastToken != 11 {
		t.Fatalf("restarted at %d digest %s token %d, was at %d digest %s", after.Applied, after.Digest, after.LastToken, before.Applied, before.Digest)
	}
	c.elect(1)
	c.check("acquire after restart", c.call(1, acquire(100, "new")), "token 12")
}

// commit-not-persisted: a Ready whose hard state only moves the commit
// index is not handed over, so the stored commit index lags what was
// applied and compacted; the member then cannot restart.
func TestBugCommitNotPersisted(t *testing.T) {
	for _, bug := range []string{"", BugCommitNotPersisted} {
		t.Run(cmp.Or(bug, "no_bug"), func(t *testing.T) {
			c := newCluster(t, 1, func(cfg *Config) { cfg.Bug, cfg.SnapshotEvery, cfg.SnapshotKeep = bug, 3, 1 })
			commitOnly := 0
			c.onReady = func(_ uint64, ev readyEvent) {
				if len(ev.rd.Entries) == 0 && ev.rd.HardState == nil && ev.storedCommitAfter < ev.raftCommitAt {
					commitOnly++
				}
			}
			c.elect(1)
			for i := uint64(1); i <= 4; i++ {
				c.call(1, acquire(i, fmt.Sprintf("k%d", i)))
			}
			hs, _, _ := c.stores[1].InitialState()
			applied := c.cores[1].Applied()
			restart := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v", r)
					}
				}()
				_, err = New(c.cfgs[1], c.now)
				return err
			}
			if bug == "" {
				if hs.GetCommit() != applied || commitOnly != 0 {
					t.Fatalf("stored commit %d, applied %d, %d commit-only hard states not handed over", hs.GetCommit(), applied, commitOnly)
				}
				if err := restart(); err != nil {
					t.Fatalf("restart: %v", err)
				}
				return
			}
			if hs.GetCommit() >= applied || commitOnly == 0 {
				t.Fatalf("with %s: stored commit %d, applied %d: the bug changed nothing", bug, hs.GetCommit(), applied)
			}
			if err := restart(); err == nil {
				t.Fatalf("with %s: restart from a snapshot past the stored commit succeeded", bug)
			}
		})
	}
}

// Sync (rule 8): a Ready with entries or a changed vote/term must be synced
// (raft's MustSync), and so must one with a snapshot; skip-fsync syncs
// nothing and snapshot-unsynced forgets the snapshot case.
func TestReadySync(t *testing.T) {
	type syncs struct{ entries, entriesSynced, snaps, snapsSynced int }
	run := func(t *testing.T, bug string) syncs {
		c := newCluster(t, 3, func(cfg *Config) { cfg.Bug, cfg.SnapshotEvery, cfg.SnapshotKeep = bug, 3, 1 })
		var s syncs
		c.onReady = func(id uint64, ev readyEvent) {
			if len(ev.rd.Entries) > 0 {
				s.entries++
				if ev.rd.Sync {
					s.entriesSynced++
				}
			}
			if ev.rd.Snapshot != nil {
				s.snaps++
				if ev.rd.Sync {
					s.snapsSynced++
				}
			}
		}
		c.elect(1)
		c.down[3] = true
		for i := uint64(1); i <= 8; i++ {
			c.call(1, acquire(i, fmt.Sprintf("k%d", i)))
		}
		c.down[3] = false
		for range 5 {
			c.tick(1)
		}
		// Member 3 caught up from the leader's snapshot.
		if a, b := c.cores[3].Status(), c.cores[1].Status(); a.Digest != b.Digest || a.LastToken != 8 {
			t.Fatalf("member 3 at %d digest %s token %d, leader at %d digest %s", a.Applied, a.Digest, a.LastToken, b.Applied, b.Digest)
		}
		if s.snaps == 0 {
			t.Fatal("no snapshot was sent")
		}
		return s
	}
	def := run(t, "")
	if def.entriesSynced != def.entries || def.snapsSynced != def.snaps {
		t.Fatalf("default: %+v, want every write synced", def)
	}
	t.Run(BugSkipFsync, func(t *testing.T) {
		s := run(t, BugSkipFsync)
		if s.entriesSynced != 0 || s.snapsSynced != 0 {
			t.Fatalf("%+v, want nothing synced", s)
		}
	})
	t.Run(BugSnapshotUnsynced, func(t *testing.T) {
		s := run(t, BugSnapshotUnsynced)
		if s.entriesSynced != s.entries || s.snapsSynced != 0 {
			t.Fatalf("%+v, want entries synced and the snapshot not", s)
		}
	})
}

// apply-before-persist: committed entries are applied when the Ready is
// taken, before the driver persisted it; correctly, at Advance.
func TestBugApplyBeforePersist(t *testing.T) {
	for _, bug := range []string{"", BugApplyBeforePersist} {
		t.Run(cmp.Or(bug, "no_bug"), func(t *testing.T) {
			c := newCluster(t, 3, func(cfg *Config) { cfg.Bug = bug })
			atReady, atAdvance := 0, 0
			c.onReady = func(id uint64, ev readyEvent) {
				if ev.appliedAtReady > ev.appliedBefore {
					atReady++
				}
				if ev.appliedAfterAdvance > ev.appliedAtReady {
					atAdvance++
				}
			}
			c.elect(1)
			c.check("acquire", c.call(1, acquire(1, "k")), "token 1")
			c.tick(1)
			if bug == "" && (atReady != 0 || atAdvance == 0) {
				t.Fatalf("%d Readies applied at Ready, %d at Advance; want all at Advance", atReady, atAdvance)
			}
			if bug != "" && (atReady == 0 || atAdvance != 0) {
				t.Fatalf("with %s: %d Readies applied at Ready, %d at Advance; want all at Ready", bug, atReady, atAdvance)
			}
		})
	}
}

// Rule 7 through the core: a grant whose answer reached a requester that
// left is released.
func TestCoreAbandonReleasesAGrantNobodyUses(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.elect(1)
	c.call(1, acquire(1, "k"))
	c.cores[1].Abandon(1, "k", 1)
	c.settle()
	if c.cores[1].Status().Locks != 0 {
		t.Fatal("ghost lock still held")
	}
	c.check("acquire", c.call(1, acquire(2, "k")), "token 2")
}

func TestStoppedCoreAnswersStopped(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.elect(1)
	c.cores[1].Submit(c.now, Request{Handle: 1, Op: OpGet, Key: "k"}) // reading
	c.cores[1].Stop()
	if got := c.cores[1].TakeAnswers(); len(got) != 1 || !errors.Is(got[0].Err, ErrUnavailable) {
		t.Fatalf("answers at stop %+v", got)
	}
	c.cores[1].Submit(c.now, acquire(2, "k"))
	if got := c.cores[1].TakeAnswers(); len(got) != 1 || !errors.Is(got[0].Err, ErrStopped) {
		t.Fatalf("answers after stop %+v", got)
	}
	if err := c.cores[1].Step(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(2))}); !errors.Is(err, ErrStopped) {
		t.Fatalf("step after stop: %v", err)
	}
	if c.cores[1].HasReady() || c.cores[1].Healthy() == nil {
		t.Fatal("stopped core has work or is healthy")
	}
}

// A failed Advance (a snapshot whose data does not restore) stops the core:
// raft was not advanced, so another Ready would make raft panic ("two
// accepted Ready structs"), and the member must not report healthy.
func TestAdvanceErrorStopsTheCore(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.elect(1)
	st := c.cores[2].Status()
	core := c.cores[2]
	snap := &raftpb.Snapshot{Data: []byte("garbage"), Metadata: &raftpb.SnapshotMetadata{
		Index: new(st.Commit + 50), Term: new(st.Term), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
	// Step refuses such a snapshot (checkSnapshot): hand it to raft
	// directly, as a snapshot that went bad after Step would arrive.
	if err := core.rn.Step(&raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		Term: new(st.Term), Snapshot: snap}); err != nil {
		t.Fatal(err)
	}
	if !core.HasReady() {
		t.Fatal("no Ready for the snapshot")
	}
	rd := core.Ready(c.now)
	c.stores[2].ApplySnapshot(rd.Snapshot)
	if err := core.Advance(c.now); err == nil {
		t.Fatal("Advance restored a garbage snapshot")
	}
	if core.Healthy() == nil {
		t.Fatal("a core whose Advance failed reports healthy")
	}
	_ = core.Step(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		Term: new(st.Term), Commit: new(st.Commit + 50)})
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("input after a failed Advance reached raft: %v", r)
		}
	}()
	if core.HasReady() {
		core.Ready(c.now)
	}
}

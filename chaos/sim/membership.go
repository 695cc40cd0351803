package sim

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/member"
)

// The membership family replaces a member as chaos's does on real
// processes (chaos/membership.go), through the members' own membership
// API (member/membership.go): it removes a voter (one at random, or one
// time in three the leader, which hands over first), waits for it to
// stop by itself, adds a fresh member (a new id, an empty disk that
// starts from the bootstrap configuration, as raftlock node --join's
// does) as a learner, and promotes it once the leader accepts (it caught
// up; by snapshot, since members compact every 30 entries). Two moments
// are aimed at:
//
//   - A leader that applies its own removal. raftlock's leader never
//     proposes its own removal (it hands over first), so half the time a
//     removed leader is given the window where it leads again before its
//     removal commits: the new leader's append of the removal reaches the
//     others, then the new leader is cut off and the others' clocks slow,
//     so the old leader wins the election, commits its own removal and
//     must step down (its driver stops it).
//   - A joiner restarted before it applied its own add: half the time the
//     newcomer is killed or loses power when the add commits, when raft
//     first hands it entries or a snapshot (before it writes them), or
//     while its first snapshot streams, and restarts 20 to 300 ms later.
//
// A change runs alone (the nemesis waits for it) and to its end, past the
// workload's time too; every step is bounded and recorded in the history
// with chaos's names (member-remove, member-removed, member-add,
// member-promote). A newcomer not promoted within newcomerBound, or any
// member refusing a snapshot whose configuration lacks it, is the
// checker's newcomer-stuck violation.

// Bounds of the membership family, chaos's (chaos/membership.go).
const (
	newcomerBound = 20 * time.Second // chaos.NewcomerBound: catch up and be promoted
	changeBound   = 15 * time.Second // a removal's or an add's retries
	changeTry     = 2 * time.Second  // one try: an answer lost with its member
	changeBackoff = 200 * time.Millisecond
	removedWait   = 5 * time.Second // a removed member stops by itself, or is killed
	aimBound      = 3 * time.Second // the self-removal aim's partition at most
)

// MembershipStats count what the membership family did.
type MembershipStats struct {
	MembersRemoved int `json:"members_removed"`
	MembersAdded   int `json:"members_added"`
	// Newcomers promoted to voter (chaos's members_replaced), and those of
	// them that installed a leader's snapshot to catch up.
	MembersReplaced    int `json:"members_replaced,omitempty"`
	ReplacedBySnapshot int `json:"replaced_by_snapshot,omitempty"`
	// Removed members that stopped by themselves: they applied their
	// removal, or a peer that had applied it refused them.
	RemovedStopped int `json:"removed_stopped_by_themselves,omitempty"`
	// Victims that led when chosen, and members that applied their own
	// removal while they led.
	LeadersRemoved    int `json:"leaders_removed,omitempty"`
	LeaderSelfRemoved int `json:"leader_applied_own_removal,omitempty"`
	// Joiners crashed before they applied their own add, then restarted.
	JoinerRestarts   int `json:"joiner_restarts,omitempty"`
	MembershipFailed int `json:"membership_faults_failed,omitempty"`
}

// How a joiner is crashed before it applied its own add.
const (
	noJoinerCrash   = -1
	joinerAtCommit  = 0 // started before the add; crashed when it commits
	joinerAtReceive = 1 // crashed at its first Ready with entries or a snapshot, before the write
	joinerMidStream = 2 // crashed while its first snapshot streams to it
)

// membership is the family's state: the change under way and the
// members it added.
type membership struct {
	s   *sim
	rng *rand.Rand // restart delays: draws made after the fault's start
	cur *replacement
	// aiming: the self-removal aim's partition and slowed clocks are in
	// force (they may outlast the change by a little).
	aiming bool
	// newcomers are the members added, in order, for the checker.
	newcomers []*newcomer
}

// replacement is one membership fault: remove victim and add a newcomer;
// or, after an earlier one failed part-way, promote learner or only add.
type replacement struct {
	victim    *node
	learner   *node
	aim       bool  // the victim leads: aim at it applying its own removal
	armed     *node // the leader whose append of the removal the aim awaits
	crash     int   // noJoinerCrash or a joiner* mode
	powerLoss bool
	frac      float64 // where in a snapshot's stream the joiner crashes
}

// newcomer is one member the family added.
type newcomer struct {
	id, replaced uint64
	started      int64 // its first start, simulated ns
	promoted     bool
	seconds      float64 // from its start to its promotion, or to giving up
	err          string
}

func newMembership(s *sim) *membership {
	return &membership{s: s, rng: rand.New(rand.NewPCG(s.cfg.Seed, 0x6d656d62))}
}

// busy says a change is under way: the nemesis waits for its end.
func (m *membership) busy() bool { return m.cur != nil || m.aiming }

// membership starts one membership fault; nil when there is nothing to do
// now (no leader, or a voter is down, which the removal would leave
// without a reachable quorum). Its heal is empty: the change heals what it
// breaks and ends by itself, and the nemesis waits for it.
func (n *nemesis) membership() func() {
	s := n.s
	l, st, ok := s.leaderStatus()
	if !ok {
		return nil
	}
	r := &replacement{crash: noJoinerCrash}
	switch {
	case len(st.Learners) > 0:
		// An earlier change added it but did not promote it.
		ln := s.nodes[st.Learners[0]-1]
		if ln.retired {
			r.victim = ln // its add was given up: remove it, add another
		} else {
			r.learner = ln
		}
	case len(st.Voters) < s.cfg.Nodes:
		// An earlier change removed a voter and did not add one.
	default:
		for _, id := range st.Voters {
			if !s.nodes[id-1].up() {
				return nil
			}
		}
		voters := make([]int, len(st.Voters))
		for i, id := range st.Voters {
			voters[i] = int(id)
		}
		victim := fault.DrawReplace(n.rng, fault.Fixed{IDs: voters, Lead: int(l.id)}).Victim
		r.victim = s.nodes[victim-1]
		r.aim = victim == int(l.id) && n.rng.IntN(2) == 0
	}
	if r.learner == nil && n.rng.IntN(2) == 0 {
		r.crash, r.powerLoss, r.frac = n.rng.IntN(3), n.rng.IntN(2) == 0, n.rng.Float64()
	}
	if s.tr.on() {
		var v, ln uint64
		if r.victim != nil {
			v = r.victim.id
		}
		if r.learner != nil {
			ln = r.learner.id
		}
		s.tr.printf("fault membership victim=%d learner=%d leader=%d aim=%v joiner-crash=%d power-loss=%v",
			v, ln, l.id, r.aim, r.crash, r.powerLoss)
	}
	s.mem.start(r)
	return func() {}
}

func (m *membership) start(r *replacement) {
	m.cur = r
	switch {
	case r.victim != nil:
		m.remove(r)
	case r.learner != nil:
		m.promote(r.learner, nil)
	default:
		m.add(r, 0)
	}
}

// done ends the change under way.
func (m *membership) done() {
	m.cur = nil
	m.s.onTransfer = nil
}

func (m *membership) record(f string, id uint64) {
	m.s.Record(history.Nemesis, history.Info, f, "", history.Value{Nodes: []int{int(id)}})
}

// inConf says whether st's configuration has id, as voter or learner.
func inConf(st member.Status, id uint64) bool {
	return slices.Contains(st.Voters, id) || slices.Contains(st.Learners, id)
}

// remove removes r.victim, waits for it to stop, then adds a newcomer.
func (m *membership) remove(r *replacement) {
	s := m.s
	v := r.victim
	v.retiring = true
	if st, ok := s.status(v); ok && st.Role == "leader" {
		s.stats.LeadersRemoved++
	}
	m.record(history.FaultMemberRemove, v.id)
	aim := r.aim
	c := &changeCall{m: m, ch: member.MembershipChange{Type: member.Remove, Member: member.Member{ID: v.id}},
		deadline: s.sch.now + int64(changeBound),
		done:     func(st member.Status) bool { return !inConf(st, v.id) },
		before: func(l *node) {
			if aim && l != v {
				aim = false
				r.armed = l
				m.aimSelfRemoval(v, l)
			}
		},
		then: func(ok bool, why string) {
			if r.armed != nil {
				r.armed.onCommit = nil // the aim never met its append
			}
			if !ok {
				s.stats.MembershipFailed++
				v.retiring = false
				if s.tr.on() {
					s.tr.printf("membership remove node=%d failed: %s", v.id, why)
				}
				m.done()
				return
			}
			s.stats.MembersRemoved++
			m.awaitStop(v, func() { m.add(r, v.id) })
		}}
	c.try()
}

// awaitStop waits up to removedWait for the removed v to stop by itself
// (it applied its removal, or a peer refused it), kills it if it has not,
// and retires it for good.
func (m *membership) awaitStop(v *node, next func()) {
	s := m.s
	s.whenRetired(v, removedWait, func() {
		if !v.retired {
			if s.tr.on() {
				s.tr.printf("membership removed node=%d did not stop within %v: killed", v.id, removedWait)
			}
			s.retire(v)
		}
		m.record(history.FaultMemberRemoved, v.id)
		next()
	})
}

// whenRetired calls then once v is retired or bound has passed, polling
// every 10ms.
func (s *sim) whenRetired(v *node, bound time.Duration, then func()) {
	deadline := s.sch.now + int64(bound)
	var poll func()
	poll = func() {
		if !v.retired && s.sch.now < deadline {
			s.sch.after(int64(10*time.Millisecond), poll)
			return
		}
		then()
	}
	poll()
}

// retire takes n out for good: killed if it runs, never restarted.
func (s *sim) retire(n *node) {
	s.crash(n, false)
	n.retired, n.retiring, n.stopped = true, false, false
}

// stopRemoved is raftlock node's stop of a member removed from the
// configuration: the core stops, what it answers goes out, the process
// exits (its disk keeps every write) and never comes back.
func (s *sim) stopRemoved(n *node, why string) {
	st, _ := s.status(n)
	core := n.core
	var answers []member.Answer
	if s.protect(n, "stop", func() error { core.Stop(); answers = core.TakeAnswers(); return nil }) != nil {
		return
	}
	s.answer(n, answers)
	n.disk.Kill()
	s.lose(n)
	n.down, n.retired, n.retiring = true, true, false
	s.stats.RemovedStopped++
	leader := st.Role == "leader"
	if leader {
		s.stats.LeaderSelfRemoved++
	}
	if s.tr.on() {
		s.tr.printf("removed node=%d stopped: %s (leader=%v term=%d)", n.id, why, leader, st.Term)
	}
}

// refusesRemoved is node/peer's removed notice: a member that applied
// from's removal refuses its stream and tells it, and from stops as
// removed. It says whether m was refused.
func (s *sim) refusesRemoved(from, target *node, m *raftpb.Message) bool {
	var removed bool
	s.protect(target, "Book", func() error {
		b, _ := target.core.Book()
		removed = slices.Contains(b.Removed, from.id)
		return nil
	})
	if !removed {
		return false
	}
	s.stats.Dropped++
	if s.tr.on() {
		s.tr.printf("refuse %d->%d %v: %d applied its removal", from.id, target.id, m.GetType(), target.id)
	}
	inc := from.incarnation
	s.sch.after(s.baseLatency(), func() {
		if from.incarnation == inc && from.up() {
			s.stopRemoved(from, fmt.Sprintf("member %d refused it", target.id))
		}
	})
	return true
}

// aimSelfRemoval arranges for the old leader v to lead again before its
// removal commits: once l, the leader v handed over to, appends the
// removal (its append on the wire to the others), l is cut off, and every
// other member's clock runs at a quarter, so v's election timeout comes
// first. v then commits its own removal as leader. The partition and the
// clocks heal once v stopped, or after aimBound.
func (m *membership) aimSelfRemoval(v, l *node) {
	s := m.s
	inc := l.incarnation
	l.onCommit = func(rd member.Ready) bool {
		if !hasConfChange(rd.Entries) {
			return false
		}
		l.onCommit = nil
		m.aiming = true
		s.sch.after(0, func() {
			if l.incarnation == inc && l.up() && v.up() {
				m.holdSelfRemoval(v, l)
				return
			}
			m.aiming = false
		})
		return false
	}
}

func hasConfChange(ents []*raftpb.Entry) bool {
	return slices.ContainsFunc(ents, func(e *raftpb.Entry) bool { return e.GetType() == raftpb.EntryType_EntryConfChangeV2 })
}

func (m *membership) holdSelfRemoval(v, l *node) {
	s := m.s
	n := &nemesis{s: s}
	n.isolate(l)
	var slowed []*node
	for _, o := range s.nodes {
		if o != v && o != l && o.up() {
			slowed = append(slowed, o)
			n.setClock(fault.Clock{Node: int(o.id), Rate: 0.25})
		}
	}
	if s.tr.on() {
		s.tr.printf("membership aim self-removal node=%d cut-off=%d", v.id, l.id)
	}
	s.whenRetired(v, aimBound, func() {
		m.aiming = false
		n.healLinks()
		for _, o := range slowed {
			if o.up() {
				n.setClock(fault.TrueClock(int(o.id)))
			}
		}
	})
}

// addNode makes a member that has never run, with the next id and an
// empty disk, and links it to every other.
func (s *sim) addNode() *node {
	id := uint64(len(s.nodes) + 1)
	n := &node{s: s, id: id, disk: NewStore(), handles: map[uint64]*attempt{}}
	for _, o := range s.nodes {
		s.links[[2]uint64{o.id, id}] = &link{}
		s.links[[2]uint64{id, o.id}] = &link{}
	}
	s.nodes = append(s.nodes, n)
	return n
}

// add adds a fresh member as a learner, starts it (before the add with
// joinerAtCommit, after it otherwise, as an operator does), aims the
// joiner crash, and promotes it.
func (m *membership) add(r *replacement, replaced uint64) {
	s := m.s
	n := s.addNode()
	nc := &newcomer{id: n.id, replaced: replaced}
	begin := func() {
		s.start(n)
		nc.started = s.sch.now
	}
	if r.crash == joinerAtCommit {
		begin()
	}
	c := &changeCall{m: m, deadline: s.sch.now + int64(changeBound),
		ch: member.MembershipChange{Type: member.AddLearner, Member: member.Member{ID: n.id,
			PeerAddr: fmt.Sprintf("sim-%d:2380", n.id), ClientAddr: fmt.Sprintf("sim-%d:2379", n.id)}},
		done: func(st member.Status) bool { return inConf(st, n.id) },
		then: func(ok bool, why string) {
			if !ok {
				// Out of the run for good: should the add apply later, the
				// next membership fault removes it.
				s.stats.MembershipFailed++
				if s.tr.on() {
					s.tr.printf("membership add node=%d failed: %s", n.id, why)
				}
				s.retire(n)
				m.done()
				return
			}
			s.stats.MembersAdded++
			m.record(history.FaultMemberAdd, n.id)
			if n.incarnation == 0 {
				begin()
			}
			m.aimJoinerCrash(r, n)
			m.newcomers = append(m.newcomers, nc)
			m.promote(n, nc)
		}}
	c.try()
}

// aimJoinerCrash arms the crash of joiner n before it applies its own add.
func (m *membership) aimJoinerCrash(r *replacement, n *node) {
	s := m.s
	crash := func() bool {
		st, ok := s.status(n)
		if !ok || inConf(st, n.id) {
			return false // down, or it applied its add: not this moment
		}
		s.stats.JoinerRestarts++
		if s.tr.on() {
			s.tr.printf("membership joiner-crash node=%d mode=%d power-loss=%v applied=%d", n.id, r.crash, r.powerLoss, st.Applied)
		}
		s.crash(n, r.powerLoss)
		m.record(history.FaultKill, n.id)
		inc := n.incarnation
		s.sch.after(int64(20*time.Millisecond)+m.rng.Int64N(int64(280*time.Millisecond)), func() {
			if n.incarnation == inc && n.restartable() {
				s.start(n)
				m.record(history.FaultStart, n.id)
			}
		})
		return true
	}
	switch r.crash {
	case joinerAtCommit:
		crash()
	case joinerAtReceive:
		n.onCommit = func(rd member.Ready) bool {
			if rd.Snapshot == nil && len(rd.Entries) == 0 {
				return false
			}
			n.onCommit = nil
			return crash()
		}
	case joinerMidStream:
		s.onTransfer = func(t *transfer) {
			if t.to != n {
				return
			}
			s.onTransfer = nil
			// Before the header arrives (at least 100µs) or a chunk after.
			at := 1 + int64(r.frac*float64(int64(100*time.Microsecond)+t.duration()))
			s.sch.after(at, func() {
				if !t.done {
					crash()
				}
			})
		}
	}
}

// promote promotes learner n once the leader accepts (it has caught up),
// within newcomerBound; nc, when n is a newcomer of this change, records
// how that went.
func (m *membership) promote(n *node, nc *newcomer) {
	s := m.s
	c := &changeCall{m: m, deadline: s.sch.now + int64(newcomerBound),
		ch:   member.MembershipChange{Type: member.Promote, Member: member.Member{ID: n.id}},
		done: func(st member.Status) bool { return slices.Contains(st.Voters, n.id) },
		then: func(ok bool, why string) {
			n.onCommit = nil
			if nc != nil {
				nc.promoted, nc.err = ok, why
				nc.seconds = float64(s.sch.now-nc.started) / 1e9
			}
			if !ok {
				s.stats.MembershipFailed++
				if s.tr.on() {
					s.tr.printf("membership promote node=%d failed: %s", n.id, why)
				}
				m.done()
				return
			}
			s.stats.MembersReplaced++
			if n.installed > 0 {
				s.stats.ReplacedBySnapshot++
			}
			m.record(history.FaultMemberPromote, n.id)
			m.done()
		}}
	c.try()
}

// evidence is the newcomer-stuck check's input: each newcomer that was
// not promoted in time, and each member that refused a snapshot whose
// configuration lacked it.
func (m *membership) evidence() *checker.Newcomers {
	ev := &checker.Newcomers{Added: len(m.newcomers)}
	for _, nc := range m.newcomers {
		if !nc.promoted {
			why := fmt.Sprintf("to replace member %d", nc.replaced)
			if nc.replaced == 0 {
				why = "after an earlier change removed a member but added none"
			}
			ev.Problems = append(ev.Problems, fmt.Sprintf("member %d, added %s, did not catch up within %v (promotion refused for %.1fs: %s)",
				nc.id, why, newcomerBound, nc.seconds, nc.err))
		}
	}
	for _, n := range m.s.nodes {
		if k := n.snapshotsRefused(); k > 0 {
			ev.Problems = append(ev.Problems, fmt.Sprintf("member %d refused %d snapshot(s) whose configuration lacked it (raftlock_snapshots_refused_total): a leader sent it a snapshot older than the change that added it", n.id, k))
		}
	}
	return ev
}

// errConnLost: the member a change was sent to went down first; whether
// it was proposed is unknown, and the next try finds out.
var errConnLost = errors.New("connection lost")

// changeCall drives one membership change to its end as raftlock member
// (chaos's adminRetry) does: ask the leader, retry after a backoff on
// anything but success, hand over when the leader is asked to remove
// itself, and stop retrying once the leader's configuration shows the
// change (a try that applied but whose answer was lost) or the deadline
// passed.
type changeCall struct {
	m        *membership
	ch       member.MembershipChange
	deadline int64
	done     func(member.Status) bool // the leader's configuration has the change
	before   func(l *node)            // called before each submission, with its leader
	then     func(ok bool, why string)
	gen      uint64 // the try under way; older callbacks are stale
	last     string // why the last try failed
	over     bool
}

func (c *changeCall) try() {
	s := c.m.s
	c.gen++
	g := c.gen
	l := s.leader()
	if l != nil {
		if st, ok := s.status(l); ok && c.done(st) {
			c.end(true, "")
			return
		}
	}
	if s.sch.now >= c.deadline {
		c.end(false, c.last)
		return
	}
	if l == nil {
		c.retry(g, "no leader")
		return
	}
	s.sch.after(int64(changeTry), func() { c.retry(g, "no answer within "+changeTry.String()) })
	if c.before != nil {
		c.before(l)
	}
	if s.tr.on() {
		s.tr.printf("membership %s node=%d to=%d", c.ch.Type, c.ch.Member.ID, l.id)
	}
	c.m.submit(l, c.ch, func(ans member.Answer) {
		if g != c.gen || c.over {
			return
		}
		switch {
		case ans.Err == nil:
			c.end(true, "") // it applied on the leader that answered
		case errors.Is(ans.Err, member.ErrLeaderMustHandOver):
			c.handOver(l, g)
		default:
			c.retry(g, ans.Err.Error())
		}
	})
}

// retry ends try g and starts the next after the backoff.
func (c *changeCall) retry(g uint64, why string) {
	if g != c.gen || c.over {
		return
	}
	c.gen++
	c.last = why
	if s := c.m.s; s.tr.on() {
		s.tr.printf("membership %s node=%d retry: %s", c.ch.Type, c.ch.Member.ID, why)
	}
	c.m.s.sch.after(int64(changeBackoff), c.try)
}

func (c *changeCall) end(ok bool, why string) {
	c.over = true
	c.gen++
	c.then(ok, why)
}

// handOver is raftlock node's HandOver on leader l: take no new calls,
// wait (up to a second) for the ones proposed to be answered, transfer
// leadership to the most up-to-date voter, wait for it to lead (two
// election timeouts at most), and take calls again if l still leads. Then
// try g is over and the change goes to the new leader.
func (c *changeCall) handOver(l *node, g uint64) {
	s := c.m.s
	inc := l.incarnation
	alive := func() bool { return l.incarnation == inc && l.up() }
	undrain := func() {
		s.input(l, input{kind: inCall, call: func(core *member.Core) {
			if _, self := core.Leader(); self {
				core.Undrain()
			}
		}})
	}
	s.input(l, input{kind: inCall, call: func(core *member.Core) { core.Drain() }})
	drained := s.sch.now + int64(time.Second)
	var wait, transfer func()
	wait = func() {
		if !alive() {
			c.retry(g, "the leader stopped while handing over")
			return
		}
		inflight := 0
		s.protect(l, "InFlight", func() error { inflight = l.core.InFlight(); return nil })
		if inflight > 0 && s.sch.now < drained {
			s.sch.after(int64(s.cfg.Tick)/4, wait)
			return
		}
		s.input(l, input{kind: inCall, call: func(core *member.Core) {
			to, err := core.TransferLeader(0)
			s.sch.after(0, func() {
				if err != nil {
					if alive() {
						undrain()
					}
					c.retry(g, "hand over: "+err.Error())
					return
				}
				until := s.sch.now + 2*10*int64(s.cfg.Tick) // two election timeouts
				transfer = func() {
					lead := uint64(0)
					if alive() {
						lead, _ = l.core.Leader()
					}
					if alive() && lead != to && s.sch.now < until {
						s.sch.after(int64(s.cfg.Tick), transfer)
						return
					}
					if alive() {
						undrain()
					}
					c.retry(g, fmt.Sprintf("handed leadership over to %d", to))
				}
				transfer()
			})
		}})
	}
	wait()
}

// submit sends the change to leader l as a client request; cb gets the
// answer (errConnLost if l goes down first).
func (m *membership) submit(l *node, ch member.MembershipChange, cb func(member.Answer)) {
	s := m.s
	s.nextHandle++
	h := s.nextHandle
	req := member.Request{Handle: h, Change: &ch}
	s.sch.after(s.clientLatency(l), func() {
		if !l.up() {
			s.sch.after(s.baseLatency(), func() { cb(member.Answer{Handle: h, Err: errConnLost}) })
			return
		}
		if l.admin == nil {
			l.admin = map[uint64]func(member.Answer){}
		}
		l.admin[h] = cb
		s.input(l, input{kind: inSubmit, req: req})
	})
}

// loseAdmin breaks the changes n had not answered when it went down.
func (s *sim) loseAdmin(n *node) {
	if len(n.admin) == 0 {
		return
	}
	for _, h := range slices.Sorted(maps.Keys(n.admin)) {
		fn := n.admin[h]
		delete(n.admin, h)
		s.toClient(n, func() { fn(member.Answer{Handle: h, Err: errConnLost}) })
	}
}

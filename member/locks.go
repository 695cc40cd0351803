package member

import (
	"container/heap"
	"fmt"
	"slices"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Op is a client request's operation.
type Op int

// Client operations.
const (
	OpAcquire Op = iota + 1
	OpRelease
	OpRenew
	OpGet
	OpList
	// OpBackup reads the whole table for a backup (backup.go): Answer.Backup.
	OpBackup
)

func (o Op) String() string {
	switch o {
	case OpAcquire:
		return "acquire"
	case OpRelease:
		return "release"
	case OpRenew:
		return "renew"
	case OpGet:
		return "get"
	case OpList:
		return "list"
	case OpBackup:
		return "backup"
	}
	return "unknown"
}

// Request is one client call.
type Request struct {
	Handle uint64 // chosen by the driver; unique among its requests in flight
	Op     Op
	Key    string
	Token  uint64        // release, renew
	Lease  time.Duration // acquire, renew
	Wait   time.Duration // acquire: how long to queue; 0 is a try-acquire
	Tag    uint64        // client operation id, carried into the log
	Stale  bool          // get, list: serve the local applied state
	// Owner says who acquires (at most fsm.MaxOwnerLen bytes); it is kept
	// with the lock and shown by get and list.
	Owner string
	// Force makes a release free key whatever its token: the current
	// holder's, read from a confirmed table. The caller checked the right
	// to do it.
	Force bool
	// Prefix, After and Limit page a list: up to Limit locks (1..MaxList)
	// whose keys start with Prefix, from the first key after After.
	Prefix string
	After  string
	Limit  int
	// Change, when set, makes this a membership change (membership.go),
	// decided by the core rather than the lock manager.
	Change *MembershipChange
}

// LockInfo answers Get.
type LockInfo struct {
	Held        bool
	Token       uint64
	Owner       string
	RemainingMS int64 // the answering member's remaining lease
}

// ListedLock is one lock of a list page.
type ListedLock struct {
	Key         string
	Token       uint64
	Owner       string
	RemainingMS int64
	LeaseMS     uint64 // the lease it was granted or last renewed for
}

// LockList answers a list: a page of locks in key order, and whether more
// follow the last one (list again with After set to its key).
type LockList struct {
	Locks []ListedLock
	More  bool
}

// List bounds: a page has at most MaxList locks, and fewer when their keys
// and owners would not fit in ListBudget bytes (one client answer frame).
const (
	MaxList     = 1000
	DefaultList = 100
	ListBudget  = 48 << 10
)

// Answer ends one Request.
type Answer struct {
	Handle uint64
	Key    string
	Token  uint64       // acquire: the fencing token; forced release: the token released
	Lock   LockInfo     // get
	List   LockList     // list
	Backup *BackupTable // backup
	// Unchanged: a membership change the configuration already had (a
	// retry of one whose answer was lost) succeeded without a proposal.
	Unchanged bool
	Err       error
}

// request is a Request the lock manager is deciding or has proposed.
type request struct {
	Request
	env       fsm.Envelope
	proposed  bool
	cancelled bool // the requester is gone (rule 7)
	delivered bool
	confirmed bool          // a quorum read confirmed the table is current
	waitUntil time.Duration // queued acquires: when to give up waiting
	// checkAt is when the wait timers look at this queued acquire next
	// (waitUntil, or the next tick when the key was not held then), and
	// wpos its place in LockManager.waitQ (-1: not there).
	checkAt time.Duration
	wpos    int
	// forceRead: a forced release read the holder's token it ends
	// (rule 12), in Token.
	forceRead bool
	// parkedOn is the key whose change in flight it waits for (park).
	parkedOn string
}

type expireMark struct {
	token uint64
	at    time.Duration
}

// Proposal is a command the lock manager decided, stamped with the term it
// was decided in: it may be proposed in that term only, since the table it
// was validated against may not hold in a later one. WithNext binds it to
// the next proposal: both go in one log entry, in this order (a handoff,
// rule 4), so that neither commits without the other.
type Proposal struct {
	Env      fsm.Envelope
	Term     uint64
	WithNext bool
}

// LockManager holds the applied lock table and every leader-side decision
// about it (the lock rules 3 to 7 of ARCHITECTURE.md). It does no I/O and reads no
// clock: each method takes the member's local time, and the decisions come
// out as proposals, answers and reads to confirm (TakeEffects). It is not
// safe for concurrent use.
type LockManager struct {
	id    uint64
	hooks hooks
	// planted: a bug is planted, which may break the invariants by
	// design (checkInvariants).
	planted bool

	machine     *fsm.Machine
	applied     uint64
	appliedTerm uint64

	leases   leaseTable // every member, local clock (rule 6; timers.go)
	requests map[uint64]*request
	pending  map[fsm.RequestID]*request
	inflight map[string]fsm.RequestID // proposed Grant per key (rule 4)
	renewing map[string]int           // proposed Renews per key
	waiters  map[string][]*request    // FIFO per key
	nwaiting int                      // the waiters over all keys
	waitQ    indexedHeap[*request]    // the waiters by wait deadline (timers.go)
	// repump are keys whose queue could not be pumped when they were
	// freed (the manager could not decide then); Tick pumps them.
	repump   map[string]struct{}
	expiring map[string]expireMark
	limits   Limits

	// handoff: a Release or Expire that frees a key with waiters carries
	// the first live waiter's Grant in its entry (false: the Grant waits
	// for the free key to apply, an ablation).
	handoff bool

	stopped  bool
	leader   bool
	term     uint64
	leaderID uint64
	barrier  bool // applied an entry of our own term (rule 3)
	seq      uint64

	// orphans are the Grants this member proposed whose requester was
	// gone when it stopped leading: nobody was told Granted (rule 7).
	// One that applies while this member leads again is a ghost, released
	// once the term barrier passes (ghosts). orphanTerm is the highest
	// term they were proposed in: once an entry of a later term applies,
	// none of them can.
	orphans    map[fsm.RequestID]struct{}
	orphanTerm uint64
	ghosts     []ghost
	// barrierToken is the last token granted when this leadership's term
	// barrier passed. A grant at or below it applied before this member
	// led again, maybe while another leader showed it held: a caller that
	// leaves afterwards does not make it a ghost (rule 7).
	barrierToken uint64

	// parked are calls waiting for a command in flight that changes who
	// holds their key to apply (unpark): a holder's call meeting a handoff
	// (the freeing Release or Expire and the first waiter's Grant in one
	// entry, rule 4), a linearizable read meeting a ghost release (rule
	// 7). Decided before, the first would answer "not the holder" while a
	// get still shows the holder, and the second would show a hold that
	// the log is about to end with no call of its holder's.
	parked map[string][]*request
	// ghostReleasing is the ghost Release in flight per key.
	ghostReleasing map[string]fsm.RequestID

	fx Effects
}

// ghost is a lock granted to a requester that is gone, to release; term is
// the term its Grant was proposed in.
type ghost struct {
	key   string
	token uint64
	term  uint64
}

// Effects are the decisions a LockManager call produced.
type Effects struct {
	Proposals []Proposal
	Answers   []Answer
	// Reads are requests whose answer depends on the table being current:
	// the member confirms its leadership with a quorum, waits until it
	// applied that far, then calls Confirmed.
	Reads []uint64
	// GhostReleases counts releases proposed for grants nobody will use.
	GhostReleases int
	// OrphansApplied counts Grants applied whose requester had left
	// before this member stopped leading the term it proposed them in.
	OrphansApplied int
}

// NewLockManager returns the manager of member id with an empty table.
// Request ids start after seqStart.
func NewLockManager(id uint64, bug string, seqStart uint64) *LockManager {
	lm := &LockManager{id: id, hooks: plantHooks(bug), seq: seqStart, handoff: true, planted: bug != ""}
	lm.limits.setDefaults()
	lm.resetLeaderState()
	lm.Restore(fsm.New(), 0, 0, 0)
	return lm
}

func (lm *LockManager) resetLeaderState() {
	lm.requests = make(map[uint64]*request)
	lm.pending = make(map[fsm.RequestID]*request)
	lm.inflight = make(map[string]fsm.RequestID)
	lm.renewing = make(map[string]int)
	lm.waiters = make(map[string][]*request)
	lm.nwaiting = 0
	lm.waitQ = nil
	lm.repump = make(map[string]struct{})
	lm.expiring = make(map[string]expireMark)
	lm.parked = make(map[string][]*request)
	lm.ghostReleasing = make(map[string]fsm.RequestID)
}

// SetHandoff turns the one-entry handoff on or off (on by default).
func (lm *LockManager) SetHandoff(on bool) { lm.handoff = on }

// TakeEffects returns and clears what the calls since the last one decided.
func (lm *LockManager) TakeEffects() Effects {
	fx := lm.fx
	lm.fx = Effects{}
	return fx
}

// Applied returns the applied index and its term.
func (lm *LockManager) Applied() (index, term uint64) { return lm.applied, lm.appliedTerm }

// Machine returns the applied table (read only).
func (lm *LockManager) Machine() *fsm.Machine { return lm.machine }

// Waiting returns how many acquires are queued.
func (lm *LockManager) Waiting() int { return lm.nwaiting }

// Restore installs a snapshot's table. Every lease restarts in full from
// now: after a restart or snapshot install a deadline is never shorter than
// a full lease (rule 6).
func (lm *LockManager) Restore(m *fsm.Machine, index, term uint64, now time.Duration) {
	lm.machine, lm.applied, lm.appliedTerm = m, index, term
	lt := newLeaseTable(m)
	lt.all = make([]lease, 0, m.Len())
	lt.q = make([]int32, 0, m.Len())
	m.Range(func(h fsm.Handle, l fsm.Lock) {
		d := time.Duration(l.LeaseMS) * time.Millisecond
		i := int32(len(lt.all))
		ls := lease{lock: h, token: l.Token, deadline: now + d, length: d, pos: i}
		ls.check = lm.hooks.expireAt(ls)
		lt.all = append(lt.all, ls)
		lt.q = append(lt.q, i)
		lt.byLock[h] = i
	})
	lt.init() // O(n): the locks came in no order
	lm.leases = lt
}

// Become records a role change. Losing leadership, or a new term, ends every
// call in progress: a proposed one with ErrOutcomeUnknown, any other with
// ErrUnavailable (nothing was proposed for it).
func (lm *LockManager) Become(leader bool, term, leaderID uint64) {
	wasLeader, oldTerm := lm.leader, lm.term
	lm.leader, lm.term, lm.leaderID = leader, term, leaderID
	if wasLeader && (!leader || term != oldTerm) {
		lm.orphan(oldTerm)
		lm.endAll(ErrOutcomeUnknown, ErrUnavailable)
		lm.resetLeaderState()
	}
	if !leader || term != oldTerm {
		lm.barrier = false
		lm.ghosts = nil // only this leadership's barrier releases them
	}
}

// orphan records, as this member stops leading term, its proposed Grants
// whose requester is gone.
func (lm *LockManager) orphan(term uint64) {
	for id, req := range lm.pending {
		if req.cancelled && req.env.Cmd.Op == fsm.OpGrant {
			if lm.orphans == nil {
				lm.orphans = make(map[fsm.RequestID]struct{})
			}
			lm.orphans[id] = struct{}{}
			lm.orphanTerm = max(lm.orphanTerm, term)
		}
	}
}

// adoptOrphan releases the lock an orphaned Grant (id, proposed in term)
// just granted, as a ghost: now if this member leads past its barrier, at
// the barrier if it leads before it, unless an entry of another leadership
// applies first (AppliedEntry). A follower leaves it to its lease: it
// cannot propose.
func (lm *LockManager) adoptOrphan(id fsm.RequestID, key string, token, term uint64) {
	if _, ok := lm.orphans[id]; !ok {
		return
	}
	delete(lm.orphans, id)
	lm.fx.OrphansApplied++
	switch {
	case lm.ready() == nil:
		lm.releaseGhost(key, token)
	case lm.leader && !lm.stopped:
		lm.ghosts = append(lm.ghosts, ghost{key, token, term})
	}
}

// Stop ends every call in progress; the manager decides nothing more.
func (lm *LockManager) Stop() {
	lm.stopped = true
	lm.endAll(ErrOutcomeUnknown, ErrUnavailable)
	lm.resetLeaderState()
}

// endAll answers every open request, in handle order so that a replay
// answers in the same order.
func (lm *LockManager) endAll(proposed, other error) {
	handles := make([]uint64, 0, len(lm.requests))
	for h := range lm.requests {
		handles = append(handles, h)
	}
	slices.Sort(handles)
	for _, h := range handles {
		req := lm.requests[h]
		if req.proposed {
			lm.deliver(req, fsm.Result{}, proposed)
		} else {
			lm.deliver(req, fsm.Result{}, other)
		}
	}
}

// ready says whether this member may make lock decisions now.
func (lm *LockManager) ready() error {
	if lm.stopped {
		return ErrStopped
	}
	if !lm.leader {
		return &NotLeaderError{LeaderID: lm.leaderID}
	}
	if !lm.barrier && lm.hooks.termBarrier {
		return ErrUnavailable
	}
	return nil
}

// Submit decides a client request at local time now.
func (lm *LockManager) Submit(now time.Duration, r Request) {
	req := &request{Request: r, wpos: -1}
	switch r.Op {
	case OpAcquire:
		if err := ValidateKey(r.Key); err != nil {
			lm.answer(req, err)
			return
		}
		if err := ValidateLease(r.Lease.Milliseconds()); err != nil {
			lm.answer(req, err)
			return
		}
		if len(r.Owner) > fsm.MaxOwnerLen {
			lm.answer(req, &InvalidArgumentError{Reason: fmt.Sprintf("owner must be at most %d bytes, got %d", fsm.MaxOwnerLen, len(r.Owner))})
			return
		}
	case OpList:
		if len(r.Prefix) > fsm.MaxKeyLen || len(r.After) > fsm.MaxKeyLen {
			lm.answer(req, &InvalidArgumentError{Reason: fmt.Sprintf("prefix and after must be at most %d bytes", fsm.MaxKeyLen)})
			return
		}
		if r.Limit < 0 || r.Limit > MaxList {
			lm.answer(req, &InvalidArgumentError{Reason: fmt.Sprintf("limit must be 1..%d, got %d", MaxList, r.Limit)})
			return
		}
	case OpRenew:
		if err := ValidateLease(r.Lease.Milliseconds()); err != nil {
			lm.answer(req, err)
			return
		}
		fallthrough
	case OpRelease, OpGet:
		if err := ValidateKey(r.Key); err != nil {
			lm.answer(req, err)
			return
		}
	case OpBackup:
	default:
		lm.answer(req, &InvalidArgumentError{Reason: "unknown operation"})
		return
	}
	lm.requests[r.Handle] = req
	lm.decide(now, req)
}

// Confirmed continues a request after a quorum read confirmed that this
// member led and had applied everything committed before the read; err
// ends it instead (the read failed).
func (lm *LockManager) Confirmed(now time.Duration, handle uint64, err error) {
	req, ok := lm.requests[handle]
	if !ok || req.delivered || req.cancelled {
		return
	}
	if err != nil {
		lm.deliver(req, fsm.Result{}, err)
		return
	}
	req.confirmed = true
	lm.decide(now, req)
}

// Abandon records that the requester of handle is gone (rule 7). A grant
// that reached the driver after the requester left is released, if it
// still holds the key.
func (lm *LockManager) Abandon(handle uint64, key string, grantedToken uint64) {
	if req, ok := lm.requests[handle]; ok {
		req.cancelled = true
		if req.parkedOn != "" {
			lm.unparkGone(req)
		}
		if !req.proposed {
			lm.removeWaiter(req)
			lm.deliver(req, fsm.Result{}, ErrUnavailable)
		}
		return
	}
	// A grant of an earlier leadership of this member's may have been
	// shown held by the leaders between: it is left to its lease.
	if grantedToken > lm.barrierToken {
		lm.releaseGhost(key, grantedToken)
	}
}

func (lm *LockManager) decide(now time.Duration, req *request) {
	switch req.Op {
	case OpAcquire:
		lm.acquire(now, req)
	case OpRelease, OpRenew:
		lm.holderCall(req)
	case OpGet:
		lm.get(now, req)
	case OpList:
		lm.list(now, req)
	case OpBackup:
		lm.backup(req)
	}
}

func (lm *LockManager) acquire(now time.Duration, req *request) {
	if err := lm.ready(); err != nil {
		lm.deliver(req, fsm.Result{}, err)
		return
	}
	key := req.Key
	_, held := lm.machine.Get(key)
	if !lm.canGrant(key, false) && req.Wait <= 0 && held && !req.confirmed {
		// "Held" is a read of the table: confirm it is current (this
		// member still leads and has applied everything committed) before
		// answering, as Get does. A deposed leader must not answer from
		// its stale table.
		lm.fx.Reads = append(lm.fx.Reads, req.Handle)
		return
	}
	req.env = lm.envelope(fsm.Command{Op: fsm.OpGrant, Key: key, LeaseMS: uint64(req.Lease.Milliseconds()), Owner: req.Owner}, req.Tag)
	switch {
	case lm.canGrant(key, false):
		if err := lm.admitGrant(); err != nil {
			lm.deliver(req, fsm.Result{}, err)
			return
		}
		lm.propose(req)
	case req.Wait <= 0 && held:
		lm.deliver(req, fsm.Result{}, ErrHeld)
	default:
		// Queued, even a try-acquire when the key is only being granted:
		// "held" is answered only once the applied state shows it held,
		// since the Grant in flight may yet be dropped.
		if err := lm.admitWaiter(key); err != nil {
			lm.deliver(req, fsm.Result{}, err)
			return
		}
		lm.queueWaiter(req, now+max(req.Wait, 0))
	}
}

// holderCall proposes a Release or Renew after checking, in the applied
// state, that the caller's token holds the key.
func (lm *LockManager) holderCall(req *request) {
	if err := lm.ready(); err != nil {
		lm.deliver(req, fsm.Result{}, err)
		return
	}
	if req.Force {
		// A forced release is the holder's release on the holder's token,
		// read from a table confirmed current (rule 12): it ends exactly
		// the hold it names, never a grant that applies after it.
		if lm.hooks.forceChecksHolder && !req.confirmed {
			lm.fx.Reads = append(lm.fx.Reads, req.Handle)
			return
		}
		// The hold it ends is the one its first decision read: decided
		// again after a handoff it waited for (below), it finds that
		// hold gone and never ends the grant that followed.
		if !req.forceRead {
			if l, held := lm.machine.Get(req.Key); held {
				req.Token = l.Token
			}
			req.forceRead = true
		}
		if !lm.hooks.forceChecksHolder {
			req.env = lm.envelope(fsm.Command{Op: fsm.OpRelease, Key: req.Key}, req.Tag)
			lm.propose(req)
			return
		}
	}
	// The table shows the caller's token holding the key, but the entry
	// that frees it and grants it to the first waiter is in flight: until
	// it applies, a read shows the holder, so "not the holder" would be
	// answered too early, and a Release (which carries no token) proposed
	// now would free the waiter's grant. Decide once it applied.
	if lm.hooks.holderWaitsForHandoff && lm.handoffInFlight(req.Key, req.Token) {
		lm.park(req.Key, req)
		return
	}
	// Decide on the applied state only: an Expire of this token may be in
	// the log already, but until it applies the token holds the key, and a
	// Renew queued behind it will simply apply as NotFound.
	if !lm.holds(req.Key, req.Token) && (req.Op == OpRenew || lm.hooks.releaseChecksHolder) {
		if req.confirmed {
			lm.deliver(req, fsm.Result{}, ErrNotFound)
			return
		}
		// "Not the holder" is a read: confirm the table is current first
		// (found by the chaos harness: a leader resumed after SIGSTOP
		// answered a renewal from the table it had before the pause).
		lm.fx.Reads = append(lm.fx.Reads, req.Handle)
		return
	}
	cmd := fsm.Command{Op: fsm.OpRenew, Key: req.Key, Token: req.Token, LeaseMS: uint64(req.Lease.Milliseconds())}
	if req.Op == OpRelease {
		cmd = fsm.Command{Op: fsm.OpRelease, Key: req.Key} // the seed's Release has no token
	}
	req.env = lm.envelope(cmd, req.Tag)
	lm.propose(req)
	if req.Op == OpRelease {
		lm.handOff(req.Key)
	}
}

// handOff follows the Release or Expire just proposed, which frees key,
// with a Grant for key's first live waiter in the same entry (rule 4: the
// key is free when the Grant applies, freed by the command before it). The
// token is still the state machine's, assigned at apply.
func (lm *LockManager) handOff(key string) {
	if !lm.handoff || lm.ready() != nil || len(lm.fx.Proposals) == 0 {
		return
	}
	if _, ok := lm.inflight[key]; ok {
		return
	}
	if w := lm.popLiveWaiter(key); w != nil {
		lm.fx.Proposals[len(lm.fx.Proposals)-1].WithNext = true
		lm.propose(w)
		lm.hooks.orderHandoff(lm.fx.Proposals)
	}
}

// awaitRead holds a linearizable read (get, list) until a quorum read
// confirms this member still leads and has applied everything committed
// (rule 9), or answers it when the manager cannot decide; false: req may
// be answered from the table now (stale, or confirmed).
func (lm *LockManager) awaitRead(req *request) bool {
	if req.Stale || !lm.hooks.linearizableReads || req.confirmed {
		return false
	}
	if err := lm.ready(); err != nil {
		lm.deliver(req, fsm.Result{}, err)
		return true
	}
	lm.fx.Reads = append(lm.fx.Reads, req.Handle)
	return true
}

func (lm *LockManager) get(now time.Duration, req *request) {
	if lm.awaitRead(req) {
		return
	}
	if _, ok := lm.ghostReleasing[req.Key]; ok && !req.Stale {
		lm.park(req.Key, req)
		return
	}
	var info LockInfo
	if l, held := lm.machine.Get(req.Key); held {
		info = LockInfo{Held: true, Token: l.Token, Owner: l.Owner, RemainingMS: lm.show(req.Key, now)}
	}
	req.delivered = true
	delete(lm.requests, req.Handle)
	lm.fx.Answers = append(lm.fx.Answers, Answer{Handle: req.Handle, Key: req.Key, Lock: info})
}

// show records that a read answered key's lock as held, which makes it no
// ghost (releaseGhost), and returns what is left of its lease on this
// member's clock.
func (lm *LockManager) show(key string, now time.Duration) int64 {
	if ls, ok := lm.leaseOf(key); ok {
		ls.shown = true
		return max(0, (ls.deadline - now).Milliseconds())
	}
	return 0
}

// list answers a page of the table, read as get reads one key.
func (lm *LockManager) list(now time.Duration, req *request) {
	if lm.awaitRead(req) {
		return
	}
	limit := req.Limit
	if limit == 0 {
		limit = DefaultList
	}
	page, more := lm.machine.List(req.Prefix, req.After, limit)
	if len(lm.ghostReleasing) > 0 && !req.Stale {
		for _, e := range page {
			if _, ok := lm.ghostReleasing[e.Key]; ok {
				lm.park(e.Key, req)
				return
			}
		}
	}
	out := LockList{Locks: make([]ListedLock, 0, len(page)), More: more}
	size := 0
	for i, e := range page {
		if size += len(e.Key) + len(e.Lock.Owner) + 32; size > ListBudget && i > 0 {
			out.More = true
			break
		}
		out.Locks = append(out.Locks, ListedLock{Key: e.Key, Token: e.Lock.Token, Owner: e.Lock.Owner, RemainingMS: lm.show(e.Key, now), LeaseMS: e.Lock.LeaseMS})
	}
	req.delivered = true
	delete(lm.requests, req.Handle)
	lm.fx.Answers = append(lm.fx.Answers, Answer{Handle: req.Handle, Key: req.Key, List: out})
}

func (lm *LockManager) envelope(cmd fsm.Command, tag uint64) fsm.Envelope {
	lm.seq++
	return fsm.Envelope{ID: fsm.RequestID{Node: lm.id, Seq: lm.seq}, Tag: tag, Cmd: cmd}
}

// propose queues req's command for the next log entry; the order of
// proposals is the order decisions were made in.
func (lm *LockManager) propose(req *request) {
	req.proposed = true
	cmd := req.env.Cmd
	if cmd.Op == fsm.OpRenew {
		lm.renewing[cmd.Key]++
	}
	if cmd.Op == fsm.OpGrant {
		lm.inflight[cmd.Key] = req.env.ID
		if tok := lm.hooks.proposedToken(lm.machine.LastToken(), len(lm.inflight)); tok != 0 {
			req.env.Tag = tok
		}
	}
	lm.pending[req.env.ID] = req
	lm.fx.Proposals = append(lm.fx.Proposals, Proposal{Env: req.env, Term: lm.term})
	if res, ok := lm.hooks.answerAtPropose(cmd, lm.machine.LastToken()); ok {
		lm.deliver(req, res, nil)
	}
}

// proposeInternal queues a command no caller waits for (Expire, a ghost
// Release) and returns its request id.
func (lm *LockManager) proposeInternal(cmd fsm.Command) fsm.RequestID {
	env := lm.envelope(cmd, 0)
	lm.fx.Proposals = append(lm.fx.Proposals, Proposal{Env: env, Term: lm.term})
	return env.ID
}

func (lm *LockManager) answer(req *request, err error) {
	lm.fx.Answers = append(lm.fx.Answers, Answer{Handle: req.Handle, Key: req.Key, Err: err})
}

func (lm *LockManager) deliver(req *request, res fsm.Result, err error) {
	if req.delivered {
		return
	}
	req.delivered = true
	if !req.proposed {
		// A proposed request stays until its command applies or is
		// dropped: the apply still needs it.
		delete(lm.requests, req.Handle)
	}
	a := Answer{Handle: req.Handle, Key: req.Key, Err: err}
	switch {
	case err != nil:
	case req.Op == OpAcquire:
		a.Token = res.Token
	case req.Force:
		a.Token = req.Token
	}
	lm.fx.Answers = append(lm.fx.Answers, a)
}

// forget drops a proposed request once its command applied or was dropped.
func (lm *LockManager) forget(req *request) {
	delete(lm.pending, req.env.ID)
	delete(lm.requests, req.Handle)
}

func (lm *LockManager) removeWaiter(req *request) {
	key := req.Key
	q := lm.waiters[key]
	for i, w := range q {
		if w == req {
			q = append(q[:i:i], q[i+1:]...)
			lm.nwaiting--
			lm.unqueueWaiter(req)
			break
		}
	}
	if len(q) == 0 {
		delete(lm.waiters, key)
	} else {
		lm.waiters[key] = q
	}
}

// canGrant: key is free in the applied state, no Grant for it is in
// flight, and nobody queued before us (FIFO).
func (lm *LockManager) canGrant(key string, ignoreWaiters bool) bool {
	if _, held := lm.machine.Get(key); held {
		return false
	}
	if _, ok := lm.inflight[key]; ok {
		return false
	}
	return ignoreWaiters || len(lm.waiters[key]) == 0
}

// handoffInFlight: the applied state shows key held by token, and a Grant
// of key is in flight, which only a handoff proposes for a held key (the
// freeing command first, in the same entry).
func (lm *LockManager) handoffInFlight(key string, token uint64) bool {
	l, held := lm.machine.Get(key)
	if !held || l.Token != token {
		return false
	}
	_, grant := lm.inflight[key]
	return grant
}

// park holds req until the command in flight that changes who holds key
// applies or is dropped (unpark).
func (lm *LockManager) park(key string, req *request) {
	req.parkedOn = key
	lm.parked[key] = append(lm.parked[key], req)
}

// unparkGone takes req, whose requester left, off the calls parked on its
// key, so that calls sent and abandoned while a change stalls do not pile
// up there.
func (lm *LockManager) unparkGone(req *request) {
	ps := lm.parked[req.parkedOn]
	if i := slices.Index(ps, req); i >= 0 {
		ps = slices.Delete(ps, i, i+1)
		if len(ps) == 0 {
			delete(lm.parked, req.parkedOn)
		} else {
			lm.parked[req.parkedOn] = ps
		}
	}
}

// unpark decides again the calls parked on key, whose change applied or
// was dropped: on the table as it is now.
func (lm *LockManager) unpark(now time.Duration, key string) {
	ps, ok := lm.parked[key]
	if !ok {
		return
	}
	delete(lm.parked, key)
	for _, req := range ps {
		req.parkedOn = ""
		if !req.delivered && !req.cancelled {
			lm.decide(now, req)
		}
	}
}

// holds: the applied state shows key held by token and no Grant for key is
// in flight (rule 5).
func (lm *LockManager) holds(key string, token uint64) bool {
	l, held := lm.machine.Get(key)
	if !held || l.Token != token {
		return false
	}
	_, grant := lm.inflight[key]
	return !grant
}

func (lm *LockManager) renewDone(key string) {
	if lm.renewing[key] <= 1 {
		delete(lm.renewing, key)
	} else {
		lm.renewing[key]--
	}
}

// releaseGhost proposes Release{key} for a lock granted to a requester that
// is gone, if this member still leads, the lock is still that grant, and
// no read of this member's has shown it held: a caller told "outcome
// unknown" may have read it and kept it as its own (rule 7).
func (lm *LockManager) releaseGhost(key string, token uint64) {
	if lm.ready() != nil || !lm.holds(key, token) {
		return
	}
	if ls, ok := lm.leaseOf(key); ok && ls.shown {
		return
	}
	lm.fx.GhostReleases++
	lm.ghostReleasing[key] = lm.proposeInternal(fsm.Command{Op: fsm.OpRelease, Key: key})
}

// pump proposes a Grant for the first live waiter of key once key is free.
func (lm *LockManager) pump(key string) {
	if lm.ready() != nil {
		if len(lm.waiters[key]) > 0 {
			lm.repump[key] = struct{}{}
		}
		return
	}
	if lm.canGrant(key, true) {
		if w := lm.popLiveWaiter(key); w != nil {
			lm.propose(w)
		}
	}
}

// popLiveWaiter takes key's first waiter whose requester is still there
// out of the queue, dropping the cancelled ones before it; nil if none.
func (lm *LockManager) popLiveWaiter(key string) *request {
	for len(lm.waiters[key]) > 0 {
		q := lm.waiters[key]
		w := q[0]
		lm.nwaiting--
		lm.unqueueWaiter(w)
		if len(q) == 1 {
			delete(lm.waiters, key)
		} else {
			lm.waiters[key] = q[1:]
		}
		if !w.cancelled {
			return w
		}
	}
	return nil
}

// Apply applies one committed command at local time now and, on the leader
// that proposed it in its current term, answers its requester and takes
// the decisions it triggers. It returns the command's result.
func (lm *LockManager) Apply(now time.Duration, env fsm.Envelope, entryTerm uint64) fsm.Result {
	res, lock := lm.machine.ApplyAt(env.Cmd)
	if res.Status == fsm.Granted {
		res.Token = lm.hooks.appliedToken(env, res)
	}
	lm.afterApply(now, env, res, lock, entryTerm)
	return res
}

// AppliedEntry records that the entry (index, term) applied; the first
// entry of the leader's own term lifts the term barrier (rule 3) and
// releases the ghosts found before it. It returns true when it did.
func (lm *LockManager) AppliedEntry(index, term uint64) bool {
	lm.applied, lm.appliedTerm = index, term
	if len(lm.orphans) > 0 && term > lm.orphanTerm {
		clear(lm.orphans) // log terms never go down: none of theirs applies now
	}
	if len(lm.ghosts) > 0 && term != lm.term && lm.hooks.otherTermsSpareGhosts {
		// An entry of a term after a ghost's and before this one: another
		// leader committed it, and with it the ghost's Grant, and may have
		// shown the lock held to a linearizable read since. Its caller,
		// told "outcome unknown", may have read it and kept it: leave it
		// to its lease.
		lm.ghosts = slices.DeleteFunc(lm.ghosts, func(g ghost) bool { return term > g.term })
	}
	if lm.leader && term == lm.term && !lm.barrier {
		lm.barrier = true
		lm.barrierToken = lm.machine.LastToken()
		for _, g := range lm.ghosts {
			lm.releaseGhost(g.key, g.token)
		}
		lm.ghosts = nil
		return true
	}
	return false
}

func (lm *LockManager) afterApply(now time.Duration, env fsm.Envelope, res fsm.Result, lock fsm.Handle, entryTerm uint64) {
	key := env.Cmd.Key
	// Leases: every member, local clock, set at apply (rule 6).
	switch res.Status {
	case fsm.Granted, fsm.Renewed:
		lm.setLease(lock, res.Token, now, env.Cmd.LeaseMS)
	case fsm.Released:
		lm.leases.remove(lock)
	case fsm.Expired:
		if res.Existed {
			lm.leases.remove(lock)
		}
		if m, ok := lm.expiring[key]; ok && m.token == env.Cmd.Token {
			delete(lm.expiring, key)
		}
	}
	if res.Status == fsm.Granted && len(lm.orphans) > 0 {
		lm.adoptOrphan(env.ID, key, res.Token, entryTerm)
	}
	if env.ID.Node != lm.id || !lm.leader || entryTerm != lm.term {
		return
	}
	// From here on: this leader proposed the command in its current term.
	req := lm.pending[env.ID]
	if req != nil {
		lm.forget(req)
	}
	changed := false // a change parked calls wait for applied
	if env.Cmd.Op == fsm.OpGrant && lm.inflight[key] == env.ID {
		delete(lm.inflight, key)
		changed = true
	}
	if id, ok := lm.ghostReleasing[key]; ok && id == env.ID {
		delete(lm.ghostReleasing, key)
		changed = true
	}
	if env.Cmd.Op == fsm.OpRenew {
		lm.renewDone(key)
	}
	switch {
	case res.Status == fsm.Granted && (req == nil || req.cancelled):
		lm.releaseGhost(key, res.Token)
	case res.Status == fsm.GrantRejected:
		if req != nil {
			lm.deliver(req, res, ErrGrantRejected)
		}
	case res.Status == fsm.NotFound && req != nil && !req.cancelled:
		lm.deliver(req, res, ErrNotFound)
	case req != nil && !req.cancelled:
		lm.deliver(req, res, nil)
	}
	if res.Status == fsm.Released || (res.Status == fsm.Expired && res.Existed) || res.Status == fsm.GrantRejected {
		lm.pump(key)
	}
	if changed {
		lm.unpark(now, key)
	}
}

// Drop answers calls whose proposal raft refused, at local time now:
// nothing entered the log, so they definitely did not happen. A key whose
// Grant is dropped goes to its next waiter; the calls parked on a dropped
// change are decided again.
func (lm *LockManager) Drop(now time.Duration, envs []fsm.Envelope) { lm.drop(now, envs, true) }

// DropAll is Drop for a manager about to lose its leadership or stop: no
// waiter is granted in the Grant's place, since nothing it proposed now
// would reach the log either, and the calls parked on a dropped change are
// answered Unavailable.
func (lm *LockManager) DropAll(envs []fsm.Envelope) { lm.drop(0, envs, false) }

func (lm *LockManager) drop(now time.Duration, envs []fsm.Envelope, pump bool) {
	var pumps, unparks []string
	for _, env := range envs {
		if lm.inflight[env.Cmd.Key] == env.ID {
			delete(lm.inflight, env.Cmd.Key)
			pumps = append(pumps, env.Cmd.Key)
			unparks = append(unparks, env.Cmd.Key)
		}
		if id, ok := lm.ghostReleasing[env.Cmd.Key]; ok && id == env.ID {
			delete(lm.ghostReleasing, env.Cmd.Key)
			unparks = append(unparks, env.Cmd.Key)
		}
		if env.Cmd.Op == fsm.OpRenew && env.ID.Node == lm.id {
			lm.renewDone(env.Cmd.Key)
		}
		if req, ok := lm.pending[env.ID]; ok {
			lm.forget(req)
			lm.deliver(req, fsm.Result{}, ErrUnavailable)
		}
		if m, ok := lm.expiring[env.Cmd.Key]; ok && env.Cmd.Op == fsm.OpExpire && m.token == env.Cmd.Token {
			delete(lm.expiring, env.Cmd.Key)
			if l, ok := lm.leaseOf(env.Cmd.Key); ok && l.token == m.token {
				lm.leases.recheck(l, m.at) // not in the log: propose it again at the next tick
			}
		}
	}
	if !pump {
		for _, k := range unparks {
			for _, req := range lm.parked[k] {
				lm.deliver(req, fsm.Result{}, ErrUnavailable)
			}
			delete(lm.parked, k)
		}
		return
	}
	for _, k := range pumps {
		lm.pump(k)
	}
	for _, k := range unparks {
		lm.unpark(now, k)
	}
}

// DropStale answers a command decided in a term that has passed: the term's
// bookkeeping was already reset, so only its requester is told.
func (lm *LockManager) DropStale(env fsm.Envelope) {
	if req, ok := lm.pending[env.ID]; ok {
		lm.forget(req)
		lm.deliver(req, fsm.Result{}, ErrUnavailable)
	}
}

// Term returns the term the manager decides in.
func (lm *LockManager) Term() uint64 { return lm.term }

// maxExpiresPerTick bounds the Expires one tick proposes, so that a mass
// expiry (a million leases granted together run out together) is spread
// over ticks instead of stalling one; the rest stay due for the next.
const maxExpiresPerTick = 4096

// Tick runs the timers at local time now: waiters whose wait ran out, and on
// the leader the Expire of every lease whose local deadline has passed.
// Its cost is in the timers that are due, never in the size of the table.
func (lm *LockManager) Tick(now time.Duration) {
	lm.tickWaiters(now)
	if len(lm.repump) > 0 && lm.ready() == nil {
		keys := make([]string, 0, len(lm.repump))
		for k := range lm.repump {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		clear(lm.repump)
		for _, key := range keys {
			lm.pump(key)
		}
	}
	lm.hooks.dueLeases(lm, now)
	if lm.ready() != nil {
		return
	}
	for n := 0; n < maxExpiresPerTick; n++ {
		l, ok := lm.leases.due(now)
		if !ok {
			break
		}
		key := lm.leases.key(l)
		if m, ok := lm.expiring[key]; ok && m.token == l.token && now-m.at < time.Second {
			// Already proposed; re-propose only if it seems lost.
			lm.leases.recheck(l, m.at+time.Second)
			continue
		}
		if lm.renewing[key] > 0 {
			// A renewal the holder was promised is in the log ahead of
			// anything we would propose now: wait for its new deadline
			// (its apply reschedules this lease), looking again next tick
			// in case it is dropped.
			lm.leases.recheck(l, now+1)
			continue
		}
		lm.expiring[key] = expireMark{token: l.token, at: now}
		lm.leases.recheck(l, now+time.Second)
		lm.proposeInternal(lm.hooks.expireCommand(key, l.token))
		lm.handOff(key)
	}
}

// tickWaiters ends the queued acquires whose wait ran out while their key
// was held: each is answered as a try-acquire would be now, which confirms
// "held" first. A wait that runs out while the key is only being granted
// (a Grant in flight may yet be dropped) is looked at again next tick.
func (lm *LockManager) tickWaiters(now time.Duration) {
	for len(lm.waitQ) > 0 && lm.waitQ[0].checkAt <= now {
		w := lm.waitQ[0]
		if _, held := lm.machine.Get(w.Key); !held {
			w.checkAt = now + 1
			heap.Fix(&lm.waitQ, 0)
			continue
		}
		lm.removeWaiter(w)
		w.Wait, w.confirmed = 0, false
		lm.acquire(now, w)
	}
}

package member

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Membership changes go through raft as single-change ConfChangeV2
// entries (never joint consensus: one voter more or less keeps every old
// quorum intersecting every new one). The entry's context names the change
// and, for an added member, its addresses, so every member updates its
// address book (book.go) when the entry applies: the book and the raft
// configuration change at the same log index everywhere.
//
// Only the leader proposes, only after its term barrier (its first entry
// applied, so raft holds no unapplied configuration change from an earlier
// term that would make it drop this one), and one change at a time.

// ChangeType names a membership change.
type ChangeType string

// Membership changes.
const (
	AddLearner ChangeType = "add-learner" // a new member, without a vote
	Promote    ChangeType = "promote"     // a caught-up learner becomes a voter
	Remove     ChangeType = "remove"      // a member leaves the configuration
)

// MembershipChange is one operator change of the configuration. For
// AddLearner, Member carries the new member's id and addresses; otherwise
// only its id.
type MembershipChange struct {
	Type   ChangeType
	Member Member
}

// Errors of membership changes.
var (
	// ErrChangeInProgress: another membership change has not applied yet.
	ErrChangeInProgress = errors.New("another membership change is in progress")
	// ErrLeaderMustHandOver: the leader was asked to remove itself; it
	// hands leadership over first (the driver does, then retries there).
	ErrLeaderMustHandOver = errors.New("the leader removes itself only after handing leadership over")
	// ErrRemoved: this member was removed from the configuration.
	ErrRemoved = errors.New("member removed from the cluster")
)

// learnerReady is how far behind the leader's log a learner may be and
// still be promoted, as a fraction of the leader's (etcd uses the same).
const learnerReady = 0.9

// confContext is a configuration entry's context.
type confContext struct {
	Change ChangeType `json:"change"`
	Member Member     `json:"member"`
	// Ref ties the entry to the proposing call on the leader that made it.
	Ref uint64 `json:"ref"`
}

type pendingChange struct {
	handle uint64
	ref    uint64
	term   uint64
	until  uint64 // tick count after which the change is given up
}

// changeMembership validates ch on the leader and proposes it; the answer
// comes when the entry applies (or leadership is lost: outcome unknown).
func (c *Core) changeMembership(r Request) {
	switch err := c.proposeChange(r); {
	case errors.Is(err, errAlreadyDone):
		c.answers = append(c.answers, Answer{Handle: r.Handle, Unchanged: true})
	case err != nil:
		c.answers = append(c.answers, Answer{Handle: r.Handle, Err: err})
	}
}

// errAlreadyDone: the configuration already is what the change asks for
// (a change retried after its answer was lost: an add of a member present
// at the same peer address, a promote of a voter, a remove of a removed
// member); it succeeds unproposed.
var errAlreadyDone = errors.New("membership change already applied")

// checkAdd checks that m may be added as a learner (inConf: its id is
// in the configuration already); errAlreadyDone when it was.
func (c *Core) checkAdd(m Member, inConf bool) error {
	id := m.ID
	switch known, _ := c.book.Get(id); {
	case inConf && known.PeerAddr == m.PeerAddr:
		return errAlreadyDone
	case inConf:
		return &InvalidArgumentError{Reason: fmt.Sprintf("member %d is already in the configuration, at peer address %s", id, orNone(known.PeerAddr))}
	case slices.Contains(c.book.Removed, id):
		return &InvalidArgumentError{Reason: fmt.Sprintf("member id %d was removed from this cluster and is never reused; pick a new id", id)}
	}
	for _, a := range []struct{ name, addr string }{{"peer address", m.PeerAddr}, {"client address", m.ClientAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil || a.addr == "" {
			return &InvalidArgumentError{Reason: fmt.Sprintf("bad %s %q: want host:port", a.name, a.addr)}
		}
	}
	for _, other := range c.book.Members {
		if other.PeerAddr == m.PeerAddr {
			return &InvalidArgumentError{Reason: fmt.Sprintf("peer address %s is member %d's", other.PeerAddr, other.ID)}
		}
	}
	return nil
}

func (c *Core) proposeChange(r Request) error {
	ch := r.Change
	if c.role != raft.StateLeader || !c.lm.leader {
		return &NotLeaderError{LeaderID: c.lead}
	}
	if !c.lm.barrier {
		return fmt.Errorf("%w: leader of term %d has not applied its first entry yet", ErrUnavailable, c.term)
	}
	if c.pending != nil {
		return ErrChangeInProgress
	}
	id := ch.Member.ID
	if id == 0 {
		return &InvalidArgumentError{Reason: "member id must be > 0"}
	}
	voter, learner := slices.Contains(c.cs.GetVoters(), id), slices.Contains(c.cs.GetLearners(), id)
	cc := &raftpb.ConfChangeSingle{NodeId: new(id)}
	switch ch.Type {
	case AddLearner:
		if err := c.checkAdd(ch.Member, voter || learner); err != nil {
			return err
		}
		cc.Type = raftpb.ConfChangeType_ConfChangeAddLearnerNode.Enum()
	case Promote:
		switch {
		case voter:
			return errAlreadyDone
		case !learner:
			return &InvalidArgumentError{Reason: fmt.Sprintf("member %d is not in the configuration", id)}
		}
		if err := c.learnerCaughtUp(id); err != nil {
			return err
		}
		cc.Type = raftpb.ConfChangeType_ConfChangeAddNode.Enum()
	case Remove:
		switch {
		case !voter && !learner && slices.Contains(c.book.Removed, id):
			return errAlreadyDone
		case !voter && !learner:
			return &InvalidArgumentError{Reason: fmt.Sprintf("member %d is not in the configuration", id)}
		case id == c.cfg.ID:
			return ErrLeaderMustHandOver
		case voter && len(c.cs.GetVoters()) == 1:
			return &InvalidArgumentError{Reason: fmt.Sprintf("member %d is the last voter", id)}
		}
		cc.Type = raftpb.ConfChangeType_ConfChangeRemoveNode.Enum()
	default:
		return &InvalidArgumentError{Reason: fmt.Sprintf("unknown membership change %q", ch.Type)}
	}
	c.rseq++
	ref := c.rseq<<16 | c.cfg.ID&0xffff
	ctx, err := json.Marshal(confContext{Change: ch.Type, Member: ch.Member, Ref: ref})
	if err != nil {
		return fmt.Errorf("encode membership change: %w", err)
	}
	v2 := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{cc}, Context: ctx}
	if err := c.rn.ProposeConfChange(v2); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	// raft turns a change it cannot take now into an empty entry, which
	// never answers: the call ends as unknown after a few election
	// timeouts, and the next change may be proposed.
	c.pending = &pendingChange{handle: r.Handle, ref: ref, term: c.term, until: c.ticks + uint64(3*c.cfg.ElectionTicks)}
	c.log.Info("proposed membership change", "change", string(ch.Type), "id", id)
	return nil
}

func orNone(addr string) string {
	if addr == "" {
		return "(none recorded)"
	}
	return addr
}

// learnerCaughtUp refuses to promote a learner whose log is far behind
// the leader's: as a voter it would count toward quorums it cannot serve.
func (c *Core) learnerCaughtUp(id uint64) error {
	st := c.rn.Status()
	pr, ok := st.Progress[id]
	self := st.Progress[c.cfg.ID]
	if !ok {
		return fmt.Errorf("%w: no progress known for learner %d", ErrUnavailable, id)
	}
	if !pr.RecentActive || float64(pr.Match) < float64(self.Match)*learnerReady {
		return &InvalidArgumentError{Reason: fmt.Sprintf("learner %d has not caught up (it has %d of %d entries); retry when it has", id, pr.Match, self.Match)}
	}
	return nil
}

// applyConfChange applies one committed configuration entry. Every member
// decides from the same bytes, so an entry this code refuses is refused
// everywhere, and raft (which panics on an impossible change) never sees
// it.
func (c *Core) applyConfChange(now time.Duration, e *raftpb.Entry) {
	cc := &raftpb.ConfChangeV2{}
	var err error
	switch e.GetType() {
	case raftpb.EntryType_EntryConfChangeV2:
		err = proto.Unmarshal(e.GetData(), cc)
	default:
		v1 := &raftpb.ConfChange{}
		if err = proto.Unmarshal(e.GetData(), v1); err == nil {
			cc = v1.AsV2()
		}
	}
	var ctx confContext
	if err == nil {
		err = json.Unmarshal(cc.GetContext(), &ctx)
	}
	if err == nil {
		err = c.checkChange(cc, &ctx)
	}
	var answer error
	if err != nil {
		c.log.Error("skipping configuration entry", "index", e.GetIndex(), "err", err)
		answer = &InvalidArgumentError{Reason: err.Error()}
	} else {
		c.cs = c.rn.ApplyConfChange(cc)
		id := ctx.Member.ID
		switch ctx.Change {
		case AddLearner:
			c.book.put(ctx.Member)
			// raft refuses a snapshot whose configuration lacks the
			// receiver, and the stored one predates this member: without
			// a snapshot taken now, a learner that needs one (the log was
			// compacted) would wait for the next scheduled snapshot.
			c.snapshotNow = c.hooks.snapshotOnAdd
		case Remove:
			c.book.remove(id)
			if id == c.cfg.ID {
				c.removed = true
			}
		}
		c.bookVersion++
		c.log.Info("membership changed", "change", string(ctx.Change), "id", id, "index", e.GetIndex(),
			"voters", c.cs.GetVoters(), "learners", c.cs.GetLearners())
	}
	if p := c.pending; p != nil && p.ref == ctx.Ref {
		c.pending = nil
		c.answers = append(c.answers, Answer{Handle: p.handle, Err: answer})
	}
}

// checkChange accepts only what proposeChange proposes: one change of a
// known kind, whose context names the same member, and never one that
// would leave no voter.
func (c *Core) checkChange(cc *raftpb.ConfChangeV2, ctx *confContext) error {
	if len(cc.GetChanges()) != 1 || cc.GetTransition() != raftpb.ConfChangeTransition_ConfChangeTransitionAuto {
		return fmt.Errorf("configuration change with %d changes (transition %s): only single changes are made", len(cc.GetChanges()), cc.GetTransition())
	}
	ch := cc.GetChanges()[0]
	if ch.GetNodeId() == 0 || ch.GetNodeId() != ctx.Member.ID {
		return fmt.Errorf("configuration change for member %d names member %d in its context", ch.GetNodeId(), ctx.Member.ID)
	}
	want := map[ChangeType]raftpb.ConfChangeType{
		AddLearner: raftpb.ConfChangeType_ConfChangeAddLearnerNode,
		Promote:    raftpb.ConfChangeType_ConfChangeAddNode,
		Remove:     raftpb.ConfChangeType_ConfChangeRemoveNode,
	}
	if t, ok := want[ctx.Change]; !ok || t != ch.GetType() {
		return fmt.Errorf("configuration change %s does not match %q", ch.GetType(), ctx.Change)
	}
	if jointConf(c.cs) {
		// raft panics applying a single change to a joint configuration;
		// raftlock never makes one, so this one came from a forged peer.
		return errors.New("configuration change while the configuration is joint: only single changes are made")
	}
	voters := c.cs.GetVoters()
	if ctx.Change == Remove && len(voters) == 1 && voters[0] == ctx.Member.ID {
		return fmt.Errorf("removing member %d would leave no voter", ctx.Member.ID)
	}
	if ctx.Change == Promote && !slices.Contains(c.cs.GetLearners(), ctx.Member.ID) {
		return fmt.Errorf("member %d is not a learner", ctx.Member.ID)
	}
	if ctx.Change == AddLearner && slices.Contains(voters, ctx.Member.ID) {
		return fmt.Errorf("member %d is a voter", ctx.Member.ID)
	}
	return nil
}

// jointConf reports whether cs is a joint configuration (or one leaving
// it): raftlock makes one change at a time and never enters one.
func jointConf(cs *raftpb.ConfState) bool {
	return len(cs.GetVotersOutgoing()) > 0 || len(cs.GetLearnersNext()) > 0 || cs.GetAutoLeave()
}

// Members returns the configuration with every member's addresses and
// role, in id order. A member in the configuration but not in the book
// (data from before the book) is listed with no address.
func (c *Core) Members() []Member {
	var out []Member
	add := func(ids []uint64, role string) {
		for _, id := range ids {
			m, _ := c.book.Get(id)
			m.ID, m.Role = id, role
			out = append(out, m)
		}
	}
	add(c.cs.GetVoters(), "voter")
	add(c.cs.GetLearners(), "learner")
	slices.SortFunc(out, func(a, b Member) int { return cmpID(a.ID, b.ID) })
	return out
}

// Book returns a copy of the address book and its version, which moves
// each time a configuration change applies or a snapshot replaces it.
func (c *Core) Book() (Book, uint64) { return c.book.clone(), c.bookVersion }

// BookVersion is the version Book would return, without the copy: a driver
// that checks it every turn copies the book only when it moved.
func (c *Core) BookVersion() uint64 { return c.bookVersion }

// Removed says whether this member applied its own removal: it takes no
// further part and its driver stops it.
func (c *Core) Removed() bool { return c.removed }

// TransferLeader asks raft to hand leadership to voter to (0: the voter
// whose log is most up to date). It returns the chosen member; the
// transfer completes when that member is elected, or is abandoned after
// an election timeout.
func (c *Core) TransferLeader(to uint64) (uint64, error) {
	if c.stopped {
		return 0, ErrStopped
	}
	if c.role != raft.StateLeader {
		return 0, &NotLeaderError{LeaderID: c.lead}
	}
	st := c.rn.Status()
	if to == 0 {
		var best uint64
		for id, pr := range st.Progress {
			if id == c.cfg.ID || pr.IsLearner || !pr.RecentActive {
				continue
			}
			if best == 0 || pr.Match > st.Progress[best].Match || (pr.Match == st.Progress[best].Match && id < best) {
				best = id
			}
		}
		if best == 0 {
			return 0, fmt.Errorf("%w: no other voter is reachable to take leadership", ErrUnavailable)
		}
		to = best
	}
	switch {
	case to == c.cfg.ID:
		return to, nil // already the leader
	case !slices.Contains(c.cs.GetVoters(), to):
		return 0, &InvalidArgumentError{Reason: fmt.Sprintf("member %d is not a voter", to)}
	}
	c.log.Info("transferring leadership", "to", to, "term", c.term)
	c.rn.TransferLeader(to)
	return to, nil
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/client/wire"
)

// adminRetry runs an admin command until it succeeds, done says the change
// is already in force (an earlier try applied but its answer was lost), or
// the bound passes; each try has a short bound of its own.
func (s *Supervisor) adminRetry(ctx context.Context, bound time.Duration, command string, args wire.MemberArgs, done func(wire.MemberList) bool) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.cl.Admin(cctx, command, args, nil, false)
		ccancel()
		if err == nil {
			return nil
		}
		if done != nil {
			if list, lerr := s.MemberList(ctx); lerr == nil && done(list) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %d: %w", command, args.ID, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// MemberList asks the leader for the configuration.
func (s *Supervisor) MemberList(ctx context.Context) (wire.MemberList, error) {
	var list wire.MemberList
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := s.cl.Admin(cctx, wire.AdminMemberList, nil, &list, true)
	return list, err
}

// role is member id's role in list, or "" when it is not a member.
func role(list wire.MemberList, id int) string {
	for _, m := range list.Members {
		if m.ID == uint64(id) {
			return m.Role
		}
	}
	return ""
}

// RemoveMember removes member id from the configuration (a leader hands
// over first), then waits up to wait for its process to stop by itself,
// as a removed member does once it applies its removal, and kills it if it
// has not. It reports whether the member stopped by itself. The member
// then leaves IDs; its data directory, log and audit journal stay.
func (s *Supervisor) RemoveMember(ctx context.Context, id int, wait time.Duration) (stoppedItself bool, err error) {
	s.mu.Lock()
	s.node(id).retiring = true
	s.mu.Unlock()
	err = s.adminRetry(ctx, 15*time.Second, wire.AdminMemberRemove, wire.MemberArgs{ID: uint64(id)},
		func(l wire.MemberList) bool { return role(l, id) == "" })
	if err != nil {
		s.mu.Lock()
		s.node(id).retiring = false
		s.mu.Unlock()
		return false, err
	}
	s.mu.Lock()
	cmd, done := s.node(id).cmd, s.node(id).exited
	s.mu.Unlock()
	if cmd != nil {
		select {
		case <-done:
			stoppedItself = true
		case <-time.After(wait):
			// A removed member learns of its removal only if the commit
			// reaches it; the leader stops sending to it once applied.
			s.Kill(ctx, id)
		}
	}
	s.mu.Lock()
	m := s.node(id)
	if cmd != nil && m.cmd == cmd {
		m.stopped() // it exited by itself: the watcher left it to us
	}
	s.members = slices.DeleteFunc(s.idsLocked(), func(j int) bool { return j == id })
	s.retired = append(s.retired, id)
	m.paused, m.clocked = false, false
	s.mu.Unlock()
	return stoppedItself, nil
}

// errNoSpare: the run used every member id it drew addresses for.
var errNoSpare = errors.New("no spare member addresses left")

// AddMember adds a new member (the next unused id, fresh addresses and an
// empty data directory) as a learner and starts it with --join. Promote
// makes it a voter once it caught up.
func (s *Supervisor) AddMember(ctx context.Context) (int, error) {
	s.mu.Lock()
	id := s.next
	if id > s.spec.Nodes+s.spare() {
		s.mu.Unlock()
		return 0, errNoSpare
	}
	s.next++
	s.mu.Unlock()
	s.addLinks(id)
	err := s.adminRetry(ctx, 15*time.Second, wire.AdminMemberAdd,
		wire.MemberArgs{ID: uint64(id), PeerAddr: s.nodes[id].gateway.Addr(), ClientAddr: s.nodes[id].client},
		func(l wire.MemberList) bool { return role(l, id) != "" })
	if err != nil {
		return id, err
	}
	s.mu.Lock()
	s.members = append(s.idsLocked(), id)
	slices.Sort(s.members)
	s.nodes[id].joined = true
	s.mu.Unlock()
	return id, s.StartNode(id)
}

// Promote makes learner id a voter, retrying while the leader refuses
// because the learner has not caught up, for up to bound. It returns how
// long that took.
func (s *Supervisor) Promote(ctx context.Context, id int, bound time.Duration) (time.Duration, error) {
	start := time.Now()
	err := s.adminRetry(ctx, bound, wire.AdminMemberPromote, wire.MemberArgs{ID: uint64(id)},
		func(l wire.MemberList) bool { return role(l, id) == "voter" })
	return time.Since(start), err
}

// NewcomerBound is how long a member added by the membership nemesis may
// take to catch up (its promotion accepted): past it, the newcomer is
// stuck, a violation.
const NewcomerBound = 20 * time.Second

// Newcomer is one member the membership nemesis added.
type Newcomer struct {
	Node     int     `json:"node"`
	Replaced int     `json:"replaced"`              // the member removed before it was added
	Seconds  float64 `json:"catch_up_seconds"`      // from its start to its promotion (or to giving up)
	Promoted bool    `json:"promoted"`              // caught up within NewcomerBound
	Err      string  `json:"error,omitempty"`       // why not
	Snapshot bool    `json:"caught_up_by_snapshot"` // it installed a leader's snapshot
}

// Newcomers lists the members the membership family added, in order.
func (n *Nemesis) Newcomers() []Newcomer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.newcomers)
}

// membership replaces a member: it removes one (the leader one time in
// three, which hands over first), waits for its process to stop by itself
// (a few seconds, then SIGKILL), adds a new member with a new id, fresh
// addresses and an empty data directory, starts it with --join, and
// promotes it once the leader accepts (it has caught up), within
// NewcomerBound. With the members' small --snapshot-every/--snapshot-keep
// and the load, the leader has compacted past index 1, so the newcomer
// catches up by installing a snapshot. The whole replacement runs to its
// end even when the run's time is up: a cluster left with a learner or a
// member short would not be the one the final checks expect.
func (n *Nemesis) membership(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	ctx = context.WithoutCancel(ctx)
	victim := fault.DrawReplace(rng, view{ctx, n.Sup}).Victim
	desc, _ := n.replace(ctx, victim)
	return func(context.Context) {}, desc
}

// replace removes member victim (running or not) and adds a new member in
// its place, promoted once it caught up, recording each step; the corrupt
// family replaces a member that refused its damaged data with it. It
// says what it did, and whether a new member joined.
func (n *Nemesis) replace(ctx context.Context, victim int) (string, bool) {
	ctx = context.WithoutCancel(ctx)
	n.setCurrent("remove member %d", victim)
	fault.Member{Step: history.FaultMemberRemove, Node: victim}.Record(n.Rec)
	stopped, err := n.Sup.RemoveMember(ctx, victim, 5*time.Second)
	if err != nil {
		n.Counts.MembershipFailed.Add(1)
		n.Log.Warn("membership fault: remove failed", "node", victim, "err", err)
		return fmt.Sprintf("remove %d failed", victim), false
	}
	if stopped {
		n.Counts.RemovedStopped.Add(1)
	}
	fault.Member{Step: history.FaultMemberRemoved, Node: victim}.Record(n.Rec)
	n.setCurrent("add a member to replace %d", victim)
	id, err := n.Sup.AddMember(ctx)
	if err != nil {
		n.Counts.MembershipFailed.Add(1)
		n.Log.Warn("membership fault: add failed", "node", id, "err", err)
		return fmt.Sprintf("removed %d, add failed", victim), false
	}
	fault.Member{Step: history.FaultMemberAdd, Node: id}.Record(n.Rec)
	n.setCurrent("wait for member %d to catch up", id)
	took, err := n.Sup.Promote(ctx, id, NewcomerBound)
	nc := Newcomer{Node: id, Replaced: victim, Seconds: took.Seconds(), Promoted: err == nil}
	if err != nil {
		nc.Err = err.Error()
		n.Log.Warn("membership fault: the newcomer did not catch up", "node", id, "bound", NewcomerBound, "err", err)
	} else {
		fault.Member{Step: history.FaultMemberPromote, Node: id}.Record(n.Rec)
		n.Counts.Replaced.Add(1)
	}
	// The install is counted before the promotion is accepted; one more
	// reading makes sure the tracker has it.
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	n.Sup.Metrics(rctx, id)
	cancel()
	if n.Sup.MemberStats(id).Installed > 0 {
		nc.Snapshot = true
		if nc.Promoted {
			n.Counts.ReplacedBySnapshot.Add(1)
		}
	}
	n.mu.Lock()
	n.newcomers = append(n.newcomers, nc)
	n.mu.Unlock()
	return fmt.Sprintf("replace %d by %d", victim, id), true
}

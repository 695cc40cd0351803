package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/raftlock/raftlock/member"
)

// Member is one member as the cluster records it (id, addresses, role).
type Member = member.Member

// MembershipChange is an operator's change of the configuration.
type MembershipChange = member.MembershipChange

// ChangeType names a membership change.
type ChangeType = member.ChangeType

// Membership changes.
const (
	AddLearner = member.AddLearner
	Promote    = member.Promote
	Remove     = member.Remove
)

// ErrRemoved is what a member that applied its own removal stops with.
var ErrRemoved = member.ErrRemoved

// Join is what a member joining a running cluster learns from it before
// its first start (raftlock node --join): the cluster id, the
// configuration the cluster was bootstrapped with (the joiner replays the
// log from its start, as the first members did) and the current members'
// peer addresses (to reach the leader before it has replayed the change
// that added it).
type Join struct {
	ClusterID uint64
	Bootstrap map[uint64]string
	Members   map[uint64]string
}

// Members returns the configuration as the leader has applied it, with
// every member's addresses and role. A follower answers NotLeaderError, so
// clients ask the leader.
func (n *Node) Members(ctx context.Context) ([]Member, error) {
	var ms []Member
	var err error
	if !n.inspect(func(c *member.Core) {
		if lead, self := c.Leader(); !self {
			err = &member.NotLeaderError{LeaderID: lead}
			return
		}
		ms = c.Members()
	}) {
		return nil, ErrStopped
	}
	if nl, ok := err.(*member.NotLeaderError); ok {
		return nil, n.redirect(nl)
	}
	return n.withClientAddrs(ms), nil
}

// withClientAddrs fills in the client addresses the configuration lacks
// (data from before the address book) from the transport's.
func (n *Node) withClientAddrs(ms []Member) []Member {
	for i := range ms {
		if ms[i].ClientAddr == "" {
			ms[i].ClientAddr = n.transport.PeerClientAddr(ms[i].ID)
		}
		if ms[i].ID == n.cfg.ID {
			ms[i].ClientAddr = n.cfg.ClientAddr
		}
	}
	return ms
}

// BootstrapPeers returns the configuration the cluster was bootstrapped
// with, id to peer address (see Join).
func (n *Node) BootstrapPeers() map[uint64]string {
	var b member.Book
	n.inspect(func(c *member.Core) { b, _ = c.Book() })
	return b.BootstrapPeers()
}

// ClusterID returns the cluster id this member checks in peer hellos (0:
// none, with a caller-supplied transport).
func (n *Node) ClusterID() uint64 {
	if n.identity == nil {
		return 0
	}
	return n.identity.ClusterID
}

// ChangeResult is what a membership change that succeeded left.
type ChangeResult struct {
	// Unchanged: the configuration already was what the change asks for
	// (a retry of a change whose answer was lost), so nothing was proposed.
	Unchanged bool
	// Members is the configuration once the change applied, as this
	// member applied it.
	Members []Member
}

// ChangeMembership proposes ch on the leader and returns once it applied,
// with the configuration it left. A change the configuration already has
// succeeds Unchanged. A leader asked to remove itself hands leadership
// over first and answers NotLeaderError naming the new leader, where the
// client retries.
func (n *Node) ChangeMembership(ctx context.Context, ch MembershipChange) (ChangeResult, error) {
	a, err := n.call(ctx, member.Request{Change: &ch})
	if errors.Is(err, member.ErrLeaderMustHandOver) {
		to, terr := n.HandOver(ctx, 0)
		if terr != nil {
			return ChangeResult{}, fmt.Errorf("hand leadership over before removing this member: %w", terr)
		}
		return ChangeResult{}, &member.NotLeaderError{LeaderID: to, LeaderAddr: n.transport.PeerClientAddr(to)}
	}
	if err != nil {
		return ChangeResult{}, err
	}
	// Read here, whoever leads by now: the change applied on this member
	// before it answered, so its configuration has it. Asking the leader
	// instead would turn a leader change right after the change into an
	// error for a change that applied.
	var ms []Member
	if !n.inspect(func(c *member.Core) { ms = c.Members() }) {
		return ChangeResult{}, ErrStopped
	}
	return ChangeResult{Unchanged: a.Unchanged, Members: n.withClientAddrs(ms)}, nil
}

// HandOver moves leadership to voter to (0: the most up-to-date other
// voter) without failing a client call: this leader takes no new calls
// (they get ErrHandingOver, which clients retry on the next leader), ends
// the ones not yet proposed the same way, waits for the proposed ones to
// apply and be answered, then transfers. If the transfer does not happen
// the member takes calls again.
func (n *Node) HandOver(ctx context.Context, to uint64) (uint64, error) {
	var err error
	if !n.inspect(func(c *member.Core) {
		if lead, self := c.Leader(); !self {
			err = &member.NotLeaderError{LeaderID: lead}
			return
		}
		c.Drain()
	}) {
		return 0, ErrStopped
	}
	if nl, ok := err.(*member.NotLeaderError); ok {
		return 0, n.redirect(nl)
	}
	if err = n.waitProposed(ctx); err == nil {
		to, err = n.TransferLeader(ctx, to)
	}
	// Whatever happened, a member that still leads (the transfer failed,
	// ctx ended first, or to was this member) must take calls again.
	n.inspect(func(c *member.Core) {
		if _, self := c.Leader(); self {
			c.Undrain()
		}
	})
	return to, err
}

// TransferLeader hands leadership to voter to (0: the most up-to-date
// other voter) and returns once that member leads, or fails at ctx's end
// or when raft gave the transfer up (after an election timeout). Calls in
// flight on this leader may end with an unknown outcome; HandOver avoids
// that.
func (n *Node) TransferLeader(ctx context.Context, to uint64) (uint64, error) {
	var err error
	if !n.inspect(func(c *member.Core) { to, err = c.TransferLeader(to) }) {
		return 0, ErrStopped
	}
	if nl, ok := err.(*member.NotLeaderError); ok {
		return 0, n.redirect(nl)
	}
	if err != nil {
		return 0, err
	}
	giveUp := time.Duration(2*n.cfg.ElectionTicks) * n.cfg.TickInterval
	deadline := time.NewTimer(giveUp)
	defer deadline.Stop()
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	for {
		var lead uint64
		if !n.inspect(func(c *member.Core) { lead, _ = c.Leader() }) {
			return 0, ErrStopped
		}
		if lead == to {
			return to, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline.C:
			return 0, fmt.Errorf("%w: member %d did not take leadership within %v (leader is %d)", ErrUnavailable, to, giveUp, lead)
		case <-tick.C:
		}
	}
}

// waitProposed waits until every call this draining leader proposed has
// applied and been answered, or ctx ends.
func (n *Node) waitProposed(ctx context.Context) error {
	tick := time.NewTicker(n.cfg.TickInterval / 4)
	defer tick.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		inflight := 0
		if !n.inspect(func(c *member.Core) { inflight = c.InFlight() }) {
			return ErrStopped
		}
		if inflight == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// drain makes the leader take no new calls and waits for the proposed
// ones to be answered; it stays draining until Close.
func (n *Node) drain(ctx context.Context) error {
	if !n.inspect(func(c *member.Core) { c.Drain() }) {
		return ErrStopped
	}
	return n.waitProposed(ctx)
}

// Shutdown stops the member gracefully: a leader takes no new calls, ends
// the ones not yet proposed as retryable, waits for the proposed ones to
// apply and be answered, hands leadership to the most up-to-date voter,
// and waits until it leads; then the member closes. A leader that is the
// only voter has nobody to hand over to and does not try. A follower just
// closes. ctx bounds the handover; at its end the member closes anyway.
func (n *Node) Shutdown(ctx context.Context) error {
	var leader, alone bool
	n.inspect(func(c *member.Core) {
		_, leader = c.Leader()
		alone = !slices.ContainsFunc(c.Status().Voters, func(id uint64) bool { return id != n.cfg.ID })
	})
	switch {
	case leader && alone:
		// No other voter to hand over to (a single member): the calls
		// proposed are still answered before the member closes.
		if err := n.drain(ctx); err != nil {
			n.log.Warn("stopping before every proposed call was answered", "err", err)
		}
	case leader:
		n.log.Info("handing leadership over before stopping")
		if to, err := n.HandOver(ctx, 0); err != nil {
			n.log.Warn("leadership handover failed; stopping anyway", "err", err)
		} else {
			n.log.Info("handed leadership over", "to", to)
		}
		// The draining that HandOver undid must hold until Close.
		n.inspect(func(c *member.Core) { c.Drain() })
	}
	return n.Close()
}

// redirect adds the leader's client address to a NotLeaderError.
func (n *Node) redirect(nl *member.NotLeaderError) error {
	if nl.LeaderID != 0 && nl.LeaderAddr == "" {
		return &member.NotLeaderError{LeaderID: nl.LeaderID, LeaderAddr: n.transport.PeerClientAddr(nl.LeaderID)}
	}
	return nl
}

// peerSetter is a transport whose peers follow the configuration.
type peerSetter interface {
	SetPeers(peers map[uint64]string, removed []uint64)
}

// syncPeers gives the transport the peers of the address book after a
// configuration change or snapshot changed it, plus the members it was
// started with that were not removed (a joining member's view of the
// current members until it has replayed the changes that added them).
func (n *Node) syncPeers(c *member.Core) {
	if c.BookVersion() == n.bookVersion && n.bookSynced {
		return
	}
	book, version := c.Book()
	n.bookVersion, n.bookSynced = version, true
	ps, ok := n.transport.(peerSetter)
	if !ok {
		return
	}
	ps.SetPeers(peersOf(book, n.cfg.Peers), book.Removed)
}

// peersOf is whom this member talks to: the members of the address book
// and the ones it was started with, minus the removed ones. Where both
// name a member, the started-with address wins: --peers is this member's
// own view of how to reach the members it names (behind a proxy, a NAT or
// a test harness's network it may differ from the address another member
// bootstrapped the book with), while the book supplies the members added
// since, which the flags cannot know.
func peersOf(book member.Book, started map[uint64]string) map[uint64]string {
	peers := book.Peers()
	maps.Copy(peers, started)
	for _, id := range book.Removed {
		delete(peers, id)
	}
	return peers
}

// ReportRemoved implements peer.RemovedHandler: peer by applied this
// member's removal, so the member stops as if it had applied it.
func (n *Node) ReportRemoved(by uint64) {
	select {
	case n.reportc <- peerReport{id: by, removed: true}:
	default:
	}
}

// Done is closed once the member has stopped: Close, a fatal error, or
// its own removal (Err says which).
func (n *Node) Done() <-chan struct{} { return n.loopDone }

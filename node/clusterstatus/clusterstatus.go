// Package clusterstatus asks a cluster's members for their raft status,
// as `raftlock status` does, and judges the answers as etcdctl endpoint
// health does: which members answered, which refused, which are
// unreachable, whether one knows a leader, and which members of the
// configuration nobody asked.
package clusterstatus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
)

// Roles of an endpoint that gave no raft status: nothing answered, or a
// member answered that the ACL refuses this identity.
const (
	RoleUnreachable = "unreachable"
	RoleRefused     = "refused"
)

// Entry is one endpoint's answer.
type Entry struct {
	// ID is the member's: from its answer, or for an endpoint that did
	// not answer from the leader's member list when it names the address.
	ID      uint64  `json:"id,omitempty"`
	Addr    string  `json:"addr"`
	Role    string  `json:"role"`
	Term    *uint64 `json:"term,omitempty"`
	Leader  *uint64 `json:"leader,omitempty"`
	Commit  *uint64 `json:"commit,omitempty"`
	Applied *uint64 `json:"applied,omitempty"`
	// Digest of the lock table at Applied: equal on every member at one
	// applied index.
	Digest string `json:"digest,omitempty"`
	// Error is why an unreachable or refused endpoint gave no status.
	Error string `json:"error,omitempty"`

	voters, learners []uint64 // the configuration this member applied
}

// Answered says whether the entry holds a member's raft status.
func (e *Entry) Answered() bool { return e.Term != nil }

// Report is every endpoint's answer and what they say together.
type Report struct {
	Entries []Entry
	// Voters and Learners are the configuration the most advanced
	// reachable member applied (the leader's, when it is reachable);
	// Known is false when no member gave one.
	Voters, Learners []uint64
	Known            bool
	// Missing are the members of the configuration no entry is about
	// (empty unless every unreachable endpoint was identified).
	Missing []uint64
	// Unreachable and Refused point into Entries.
	Unreachable, Refused []*Entry
	Answered             int
}

// Gather asks every endpoint for its status, each within timeout. list,
// when not nil, is the leader's member list already fetched; without it
// one is asked for when an unreachable endpoint must be identified.
func Gather(ctx context.Context, cl *client.Client, eps []string, list *wire.MemberList, timeout time.Duration) *Report {
	r := &Report{Entries: make([]Entry, len(eps))}
	done := make(chan struct{}, len(eps))
	for i, ep := range eps {
		go func() {
			defer func() { done <- struct{}{} }()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r.Entries[i] = ask(cctx, cl, ep)
		}()
	}
	for range eps {
		<-done
	}
	r.classify()
	// Which members the unreachable endpoints are: without that, every one
	// of them would read as a member that was not asked.
	identified := true
	if r.Known && len(r.Unreachable) > 0 {
		if list == nil {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			list = new(wire.MemberList)
			if cl.Admin(cctx, wire.AdminMemberList, nil, list, true) != nil {
				list = nil
			}
			cancel()
		}
		for _, e := range r.Unreachable {
			if list != nil {
				if i := slices.IndexFunc(list.Members, func(m node.Member) bool { return m.ClientAddr == e.Addr }); i >= 0 {
					e.ID = list.Members[i].ID
				}
			}
			identified = identified && e.ID != 0
		}
	}
	if r.Known && identified {
		r.Missing = notShown(r.Entries, r.Voters, r.Learners)
	}
	return r
}

// classify sorts the entries into answered, refused and unreachable, and
// finds the configuration.
func (r *Report) classify() {
	for i := range r.Entries {
		switch e := &r.Entries[i]; {
		case e.Answered():
			r.Answered++
		case e.Role == RoleRefused:
			r.Refused = append(r.Refused, e)
		default:
			r.Unreachable = append(r.Unreachable, e)
		}
	}
	r.Voters, r.Learners, r.Known = configuration(r.Entries)
}

// ask is one endpoint's entry.
func ask(ctx context.Context, cl *client.Client, ep string) Entry {
	st, err := cl.Status(ctx, ep)
	switch {
	case errors.Is(err, client.ErrPermissionDenied):
		// It answered: reachable, but this identity may not ask.
		return Entry{Addr: ep, Role: RoleRefused, Error: strings.TrimPrefix(err.Error(), "raftlock: ")}
	case err != nil:
		return Entry{Addr: ep, Role: RoleUnreachable, Error: strings.TrimPrefix(err.Error(), "raftlock: ")}
	}
	role := st.Role
	if slices.Contains(st.Learners, st.ID) {
		role = "learner"
	}
	return Entry{ID: st.ID, Addr: ep, Role: role, Term: &st.Term, Leader: &st.Leader, Commit: &st.Commit, Applied: &st.Applied, Digest: st.Digest,
		voters: st.Voters, learners: st.Learners}
}

// configuration is the configuration the most advanced reachable member
// has applied (the leader's, when it is reachable).
func configuration(entries []Entry) (voters, learners []uint64, ok bool) {
	var best *Entry
	for i := range entries {
		e := &entries[i]
		if e.Applied == nil || len(e.voters) == 0 {
			continue
		}
		if best == nil || e.Role == "leader" || (best.Role != "leader" && *e.Applied > *best.Applied) {
			best = e
		}
	}
	if best == nil {
		return nil, nil, false
	}
	return best.voters, best.learners, true
}

// notShown returns the members of the configuration no entry is about.
func notShown(entries []Entry, voters, learners []uint64) []uint64 {
	var missing []uint64
	for _, id := range append(slices.Clone(voters), learners...) {
		if !slices.ContainsFunc(entries, func(e Entry) bool { return e.ID == id }) {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	return missing
}

// Verdict is the report's judgement, as etcdctl endpoint health's: nil
// when every member asked answered and one knows a leader; an error when
// a member asked is unreachable or none knows a leader. refused says the
// error is the ACL's refusal (the permission exit, not the failure one).
func (r *Report) Verdict() (refused bool, err error) {
	if len(r.Refused) == len(r.Entries) {
		return true, errors.New(r.Refused[0].Error)
	}
	if r.Answered == 0 && len(r.Refused) == 0 {
		// Say why, as the other commands do: "the member requires TLS"
		// helps where "unreachable" alone sends the user to the network.
		return false, fmt.Errorf("no member reachable: %s: %s", r.Entries[0].Addr, r.Entries[0].Error)
	}
	if len(r.Unreachable) > 0 {
		addrs := make([]string, len(r.Unreachable))
		for i, e := range r.Unreachable {
			addrs[i] = e.Addr
			if e.ID != 0 {
				addrs[i] += fmt.Sprintf(" (member %d)", e.ID)
			}
		}
		noun := "endpoints"
		if len(r.Unreachable) == 1 {
			noun = "endpoint"
		}
		return false, fmt.Errorf("%d %s of %d unreachable: %s", len(r.Unreachable), noun, len(r.Entries), strings.Join(addrs, ", "))
	}
	hasLeader := false
	for _, e := range r.Entries {
		hasLeader = hasLeader || (e.Answered() && *e.Leader != 0)
	}
	if r.Answered > 0 && !hasLeader {
		return false, errors.New("no leader: no member asked knows one (the cluster cannot serve until a majority of its voters can elect one)")
	}
	if len(r.Refused) > 0 {
		return true, fmt.Errorf("refused by %s: %s", r.Refused[0].Addr, r.Refused[0].Error)
	}
	return false, nil
}

// JoinIDs spells member ids as the status lines do: "1 2 3", or "none".
func JoinIDs(ids []uint64) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, " ")
}

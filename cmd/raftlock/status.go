package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/server"
)

// Roles of an endpoint that gave no raft status: nothing answered, or a
// member answered that the ACL refuses this identity.
const (
	roleUnreachable = "unreachable"
	roleRefused     = "refused"
)

type statusEntry struct {
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

// answered says whether the entry holds a member's raft status.
func (e *statusEntry) answered() bool { return e.Term != nil }

// configuration is the configuration the most advanced reachable member
// has applied (the leader's, when it is reachable).
func configuration(entries []statusEntry) (voters, learners []uint64, ok bool) {
	var best *statusEntry
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

func joinIDs(ids []uint64) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, " ")
}

const statusSynopsis = `status [--cluster] [--json]

Asks every endpoint (with --cluster, every member of the configuration) for
its raft status. Exit status, as etcdctl endpoint health: 0 when every member
asked answered and one knows a leader; 1 when a member asked is unreachable
or none knows a leader; 6 when the cluster's ACL refuses this identity.`

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusSynopsis)
	var cf clientFlags
	cf.register(fs, true)
	wholeCluster := fs.Bool("cluster", false, "ask every member of the configuration (from the leader's member list; needs the admin right under an ACL), not only --endpoints")
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	eps := cl.Endpoints()
	var list *server.MemberList
	if *wholeCluster {
		list = new(server.MemberList)
		if err := adminCall(&cf, stdout, wire.AdminMemberList, nil, list, true); err != nil {
			return err
		}
		eps = eps[:0]
		for _, m := range list.Members {
			eps = append(eps, m.ClientAddr)
		}
	}
	askTimeout := min(cf.timeout, 2*time.Second)
	entries := make([]statusEntry, len(eps))
	done := make(chan struct{}, len(eps))
	for i, ep := range eps {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
			defer cancel()
			st, err := cl.Status(ctx, ep)
			switch {
			case errors.Is(err, client.ErrPermissionDenied):
				// It answered: reachable, but this identity may not ask.
				entries[i] = statusEntry{Addr: ep, Role: roleRefused, Error: strings.TrimPrefix(err.Error(), "raftlock: ")}
				return
			case err != nil:
				entries[i] = statusEntry{Addr: ep, Role: roleUnreachable, Error: strings.TrimPrefix(err.Error(), "raftlock: ")}
				return
			}
			role := st.Role
			if slices.Contains(st.Learners, st.ID) {
				role = "learner"
			}
			entries[i] = statusEntry{ID: st.ID, Addr: ep, Role: role, Term: &st.Term, Leader: &st.Leader, Commit: &st.Commit, Applied: &st.Applied, Digest: st.Digest,
				voters: st.Voters, learners: st.Learners}
		}()
	}
	for range eps {
		<-done
	}
	var unreachable, refused []*statusEntry
	answered := 0
	for i := range entries {
		switch e := &entries[i]; {
		case e.answered():
			answered++
		case e.Role == roleRefused:
			refused = append(refused, e)
		default:
			unreachable = append(unreachable, e)
		}
	}
	voters, learners, known := configuration(entries)
	// Which members the unreachable endpoints are: without that, every one
	// of them would read as a member that was not asked.
	identified := true
	if known && len(unreachable) > 0 {
		if list == nil {
			ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
			list = new(server.MemberList)
			if cl.Admin(ctx, wire.AdminMemberList, nil, list, true) != nil {
				list = nil
			}
			cancel()
		}
		for _, e := range unreachable {
			if list != nil {
				if i := slices.IndexFunc(list.Members, func(m node.Member) bool { return m.ClientAddr == e.Addr }); i >= 0 {
					e.ID = list.Members[i].ID
				}
			}
			identified = identified && e.ID != 0
		}
	}
	var missing []uint64
	if known && identified {
		missing = notShown(entries, voters, learners)
	}
	if cf.json {
		out := map[string]any{"nodes": entries}
		if known {
			out["configuration"] = map[string][]uint64{"voters": voters, "learners": append([]uint64{}, learners...)}
			if len(missing) > 0 {
				out["not_asked"] = missing
			}
		}
		if err := printJSON(stdout, out); err != nil {
			return err
		}
	} else {
		printStatus(stdout, entries, refused)
		if known {
			fmt.Fprintf(stdout, "configuration: voters %s; learners %s\n", joinIDs(voters), joinIDs(learners))
			if len(missing) > 0 {
				noun := "member"
				if len(missing) > 1 {
					noun = "members"
				}
				fmt.Fprintf(stdout, "not asked: %s %s (status --cluster asks every member)\n", noun, joinIDs(missing))
			}
		}
	}
	return statusExit(entries, answered, unreachable, refused)
}

// printStatus prints the table, and why the members that refused did.
func printStatus(stdout io.Writer, entries []statusEntry, refused []*statusEntry) {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDR\tROLE\tTERM\tLEADER\tCOMMIT\tAPPLIED\tDIGEST")
	for _, e := range entries {
		id := "-"
		if e.ID != 0 {
			id = strconv.FormatUint(e.ID, 10)
		}
		if !e.answered() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\n", id, e.Addr, e.Role)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", id, e.Addr, e.Role, *e.Term, *e.Leader, *e.Commit, *e.Applied, e.Digest)
	}
	tw.Flush()
	// One line per reason: the same ACL usually refuses everywhere.
	var reasons []string
	by := map[string][]string{}
	for _, e := range refused {
		if by[e.Error] == nil {
			reasons = append(reasons, e.Error)
		}
		by[e.Error] = append(by[e.Error], e.Addr)
	}
	for _, r := range reasons {
		fmt.Fprintf(stdout, "refused by %s: %s\n", strings.Join(by[r], ", "), r)
	}
}

// statusExit is status's exit, as etcdctl endpoint health's: an error
// when a member asked is unreachable or no member knows a leader, a
// permission error when the ACL refused.
func statusExit(entries []statusEntry, answered int, unreachable, refused []*statusEntry) error {
	if len(refused) == len(entries) {
		return withCode(exitPermission, errors.New(refused[0].Error))
	}
	if answered == 0 && len(refused) == 0 {
		// Say why, as the other commands do: "the member requires TLS"
		// helps where "unreachable" alone sends the user to the network.
		return withCode(exitError, fmt.Errorf("no member reachable: %s: %s", entries[0].Addr, entries[0].Error))
	}
	if len(unreachable) > 0 {
		addrs := make([]string, len(unreachable))
		for i, e := range unreachable {
			addrs[i] = e.Addr
			if e.ID != 0 {
				addrs[i] += fmt.Sprintf(" (member %d)", e.ID)
			}
		}
		return withCode(exitError, fmt.Errorf("%s of %d unreachable: %s", plural(len(unreachable), "endpoint", "endpoints"), len(entries), strings.Join(addrs, ", ")))
	}
	hasLeader := false
	for _, e := range entries {
		hasLeader = hasLeader || (e.answered() && *e.Leader != 0)
	}
	if answered > 0 && !hasLeader {
		return withCode(exitError, errors.New("no leader: no member asked knows one (the cluster cannot serve until a majority of its voters can elect one)"))
	}
	if len(refused) > 0 {
		return withCode(exitPermission, fmt.Errorf("refused by %s: %s", refused[0].Addr, refused[0].Error))
	}
	return nil
}

// notShown returns the members of the configuration no entry is about.
func notShown(entries []statusEntry, voters, learners []uint64) []uint64 {
	var missing []uint64
	for _, id := range append(slices.Clone(voters), learners...) {
		if !slices.ContainsFunc(entries, func(e statusEntry) bool { return e.ID == id }) {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	return missing
}

package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/clusterstatus"
	"github.com/raftlock/raftlock/node/server"
)

// joinIDs spells member ids "1 2 3", or "none".
func joinIDs(ids []uint64) string { return clusterstatus.JoinIDs(ids) }

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
	r := clusterstatus.Gather(context.Background(), cl, eps, list, min(cf.timeout, 2*time.Second))
	if err := printReport(stdout, r, cf.json); err != nil {
		return err
	}
	refused, err := r.Verdict()
	switch {
	case err == nil:
		return nil
	case refused:
		return withCode(exitPermission, err)
	}
	return withCode(exitError, err)
}

// printReport prints the table and the configuration, or with --json
// {"nodes", "configuration", "not_asked"}.
func printReport(stdout io.Writer, r *clusterstatus.Report, asJSON bool) error {
	entries, voters, learners, known, missing := r.Entries, r.Voters, r.Learners, r.Known, r.Missing
	if asJSON {
		out := map[string]any{"nodes": entries}
		if known {
			out["configuration"] = map[string][]uint64{"voters": voters, "learners": append([]uint64{}, learners...)}
			if len(missing) > 0 {
				out["not_asked"] = missing
			}
		}
		return printJSON(stdout, out)
	}
	printStatus(stdout, entries, r.Refused)
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
	return nil
}

// printStatus prints the table, and why the members that refused did.
func printStatus(stdout io.Writer, entries []clusterstatus.Entry, refused []*clusterstatus.Entry) {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDR\tROLE\tTERM\tLEADER\tCOMMIT\tAPPLIED\tDIGEST")
	for _, e := range entries {
		id := "-"
		if e.ID != 0 {
			id = strconv.FormatUint(e.ID, 10)
		}
		if !e.Answered() {
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

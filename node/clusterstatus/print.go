package clusterstatus

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Write prints the report as raftlock status does: the table, why the
// members that refused did, and the configuration; with asJSON
// {"nodes", "configuration", "not_asked"}.
func (r *Report) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		out := map[string]any{"nodes": r.Entries}
		if r.Known {
			out["configuration"] = map[string][]uint64{"voters": r.Voters, "learners": append([]uint64{}, r.Learners...)}
			if len(r.Missing) > 0 {
				out["not_asked"] = r.Missing
			}
		}
		return json.NewEncoder(w).Encode(out)
	}
	r.writeTable(w)
	if r.Known {
		fmt.Fprintf(w, "configuration: voters %s; learners %s\n", JoinIDs(r.Voters), JoinIDs(r.Learners))
		if len(r.Missing) > 0 {
			noun := "member"
			if len(r.Missing) > 1 {
				noun = "members"
			}
			fmt.Fprintf(w, "not asked: %s %s (status --cluster asks every member)\n", noun, JoinIDs(r.Missing))
		}
	}
	return nil
}

// writeTable prints the table, and why the members that refused did.
func (r *Report) writeTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDR\tROLE\tTERM\tLEADER\tCOMMIT\tAPPLIED\tDIGEST")
	for _, e := range r.Entries {
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
	for _, e := range r.Refused {
		if by[e.Error] == nil {
			reasons = append(reasons, e.Error)
		}
		by[e.Error] = append(by[e.Error], e.Addr)
	}
	for _, reason := range reasons {
		fmt.Fprintf(w, "refused by %s: %s\n", strings.Join(by[reason], ", "), reason)
	}
}

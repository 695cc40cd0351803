package checker

import (
	"fmt"

	"github.com/raftlock/raftlock/checker/history"
)

// CommittedLog is the cluster's committed log as the chaos harness's
// post-run audit read it from a member: every applied command with its
// result, and the tag (the history's invoke index + 1) the client sent
// with it.
type CommittedLog struct {
	// Final: the log holds every entry from index 1 and the members
	// converged, so a command absent from it never happened. Without it
	// only what the log holds is evidence.
	Final    bool         `json:"final"`
	Commands []LogCommand `json:"commands"`
}

// LogCommand is one applied command (the fields of a member's /debug/log).
type LogCommand struct {
	Index  uint64 `json:"index"`
	Op     string `json:"op"` // grant, release, renew, expire
	Key    string `json:"key"`
	Tag    uint64 `json:"tag,omitempty"`
	Status string `json:"status"` // Granted, GrantRejected, Released, Renewed, NotFound, Expired, Noop
	Token  uint64 `json:"token,omitempty"`
}

// the log's op and success status for each history operation.
var logOps = map[string]struct{ op, success string }{
	history.OpAcquire: {"grant", "Granted"},
	history.OpRelease: {"release", "Released"},
	history.OpRenew:   {"renew", "Renewed"},
}

// tagged indexes the log's tagged commands by tag (the first one wins: a
// tag names one request, proposed at most once).
func (l CommittedLog) tagged() map[uint64]LogCommand {
	byTag := map[uint64]LogCommand{}
	for _, c := range l.Commands {
		if _, dup := byTag[c.Tag]; c.Tag != 0 && !dup {
			byTag[c.Tag] = c
		}
	}
	return byTag
}

// Resolve settles the history's info acquires, releases and renewals
// against the committed log: one found applied with success happened (an
// acquire with its token); one found with another status, or absent from
// a final log, did not. Anything else stays unknown and is not listed.
// Resolve is a pure function of its arguments.
func Resolve(events []history.Event, log CommittedLog) []Resolution {
	byTag := log.tagged()
	var out []Resolution
	ops, _ := Pair(events)
	for _, o := range ops {
		want, ok := logOps[o.F]
		if !ok || o.Type != history.Info {
			continue
		}
		r := Resolution{Index: o.Invoke.Index}
		if o.F != history.OpAcquire {
			r.F = o.F
		}
		c, found := byTag[uint64(o.Invoke.Index)+1]
		switch {
		case found && c.Op == want.op && c.Status == want.success:
			r.Happened, r.Token = true, c.Token
			if o.F != history.OpAcquire {
				r.Token = 0
			}
		case found || log.Final:
		default:
			continue
		}
		out = append(out, r)
	}
	return out
}

// checkAudit holds the history against the committed log: the state
// machine never rejected a grant (rule 4: the leader proposes a Grant only
// for a free key), every operation a client heard succeed is in the log as
// it heard it (a missing one is a lost acknowledged write), and none a
// client heard fail applied.
func checkAudit(ops []*Op, log *CommittedLog) Result {
	res := Result{Name: "audit", Decides: true, Status: StatusOK}
	if log == nil {
		res.Status, res.Note = StatusSkipped, "no committed log given (chaos reads one; check takes --log)"
		return res
	}
	if !log.Final {
		res.Note = "the log is not final: absent commands prove nothing"
	}
	for _, c := range log.Commands {
		if c.Status == "GrantRejected" {
			res.Violations = append(res.Violations, Violation{Key: c.Key, Message: fmt.Sprintf(
				"the state machine rejected a grant of %q at log index %d: the leader proposed a Grant for a key that was not free", c.Key, c.Index)})
		}
	}
	byTag := log.tagged()
	for _, o := range ops {
		want, ok := logOps[o.F]
		if !ok || (o.Type != history.OK && o.Type != history.Fail) {
			continue
		}
		c, found := byTag[uint64(o.Invoke.Index)+1]
		applied := found && c.Op == want.op && c.Status == want.success
		switch {
		case o.Type == history.OK && found && !applied:
			res.Violations = append(res.Violations, Violation{Key: o.Key, Events: o.events(), Message: fmt.Sprintf(
				"%s answered ok but applied at log index %d as %s", o.F, c.Index, c.Status)})
		case o.Type == history.OK && applied && o.F == history.OpAcquire && c.Token != o.Token():
			res.Violations = append(res.Violations, Violation{Key: o.Key, Events: o.events(), Message: fmt.Sprintf(
				"acquire answered token %d but applied at log index %d with token %d", o.Token(), c.Index, c.Token)})
		case o.Type == history.OK && !found && log.Final:
			res.Violations = append(res.Violations, Violation{Key: o.Key, Events: o.events(), Message: fmt.Sprintf(
				"%s answered ok is not in the final committed log: an acknowledged %s was lost", o.F, o.F)})
		case o.Type == history.Fail && applied:
			res.Violations = append(res.Violations, Violation{Key: o.Key, Events: o.events(), Message: fmt.Sprintf(
				"%s answered %q but applied at log index %d as %s", o.F, o.Error(), c.Index, c.Status)})
		}
	}
	if len(res.Violations) > 0 {
		res.Status = StatusViolation
	}
	return res
}

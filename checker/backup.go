package checker

import (
	"fmt"
	"sort"

	"github.com/raftlock/raftlock/checker/history"
)

// Backup is one backup a harness took during the run, as raftlock snapshot
// save captures it, for the backup-freshness check: when it was asked for
// and answered, on the history's clock (ns since the run began), and what
// its table held.
type Backup struct {
	Member    int    `json:"member"` // the member that answered
	Invoked   int64  `json:"invoked"`
	Completed int64  `json:"completed"`
	Index     uint64 `json:"index"` // the applied index the table was read at
	LastToken uint64 `json:"last_token"`
	// Locks are the table's locks on the keys the history's operations
	// name, key to token; a key it lacks is free in the table.
	Locks map[string]uint64 `json:"locks"`
}

// checkBackups: a backup is never older than an answer the cluster gave
// before it was asked for. Every lock operation acknowledged (ok) before
// the backup's invocation applied before the backup's read, so its table
// holds what they did: a last token at least as high as any token they
// saw, and on each key no lock older than the latest they saw there, nor
// the lock of a release acknowledged there. A lock the table lacks may
// have expired since, which no history shows, so absence decides nothing.
func checkBackups(ops []*Op, backups []Backup) Result {
	res := Result{Name: "backup-freshness", Decides: true, Status: StatusOK}
	if backups == nil {
		res.Status, res.Note = StatusSkipped, "no backups (only the simulator takes them)"
		return res
	}
	var acked []*Op // lock operations acknowledged, by return time
	for _, o := range ops {
		if _, ok := sightingOf(o); ok && isLockOp(o) {
			acked = append(acked, o)
		}
	}
	sort.SliceStable(acked, func(i, j int) bool { return acked[i].Return() < acked[j].Return() })
	bs := append([]Backup(nil), backups...)
	sort.SliceStable(bs, func(i, j int) bool { return bs[i].Invoked < bs[j].Invoked })
	// Walk the backups in invocation order, keeping what the operations
	// acknowledged before each: the highest token seen over all keys and,
	// per key, the operation that saw the highest token there.
	var top *Op
	latest := map[string]*Op{}
	i := 0
	for _, b := range bs {
		for ; i < len(acked) && acked[i].Return() < b.Invoked; i++ {
			o := acked[i]
			t, _ := sightingOf(o)
			if top == nil || t > topToken(top) {
				top = o
			}
			// On one key a later release of the same token outranks the
			// grant it ends.
			if l := latest[o.Key]; l == nil || t > topToken(l) || (t == topToken(l) && o.F == history.OpRelease) {
				latest[o.Key] = o
			}
		}
		if top != nil && b.LastToken < topToken(top) {
			res.Violations = append(res.Violations, Violation{Key: top.Key,
				Message: fmt.Sprintf("%s has last token %d, but token %d was acknowledged before it was asked for: %s",
					describeBackup(b), b.LastToken, topToken(top), describe(top)),
				Events: top.events()})
		}
		for _, key := range sortedKeys(b.Locks) {
			l := latest[key]
			if l == nil {
				continue
			}
			have, want := b.Locks[key], topToken(l)
			if have < want || (have == want && l.F == history.OpRelease) {
				res.Violations = append(res.Violations, Violation{Key: key,
					Message: fmt.Sprintf("%s holds %q with token %d, older than what was acknowledged there before it was asked for: %s",
						describeBackup(b), key, have, describe(l)),
					Events: l.events()})
			}
		}
	}
	switch {
	case len(res.Violations) > maxBackupViolations:
		res.Status = StatusViolation
		res.Note = fmt.Sprintf("backups lack what the cluster had acknowledged before they were asked for (%d violations, the first %d listed)",
			len(res.Violations), maxBackupViolations)
		res.Violations = res.Violations[:maxBackupViolations]
	case len(res.Violations) > 0:
		res.Status, res.Note = StatusViolation, "a backup lacks what the cluster had acknowledged before it was asked for"
	default:
		res.Note = fmt.Sprintf("%d backup(s), each holding every lock operation acknowledged before it was asked for", len(backups))
	}
	return res
}

// maxBackupViolations bounds the violations listed: a stale member answers
// every backup asked of it until it learns of its successor.
const maxBackupViolations = 20

func topToken(o *Op) uint64 {
	t, _ := sightingOf(o)
	return t
}

func describeBackup(b Backup) string {
	return fmt.Sprintf("the backup member %d answered at index %d [%s, %s]", b.Member, b.Index, ms(b.Invoked), ms(b.Completed))
}

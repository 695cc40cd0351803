package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/raftlock/raftlock/checker"
)

// auditLog is what a member's GET /debug/log returns (the fields used here).
type auditLog struct {
	Complete bool                 `json:"complete"`
	Commands []checker.LogCommand `json:"commands"`
}

// bestAuditLog asks every member for its applied log and returns the one
// to audit against: a complete one (its journal covers every applied entry
// from index 1), else the longest, which then says complete=false. A member
// that installed a snapshot from the leader has a gap; another may not.
// Members the membership nemesis removed are read too, from the journal
// they left on disk: what they applied while members counts. A member
// that joined by snapshot starts late (a gap, so not complete), and one
// removed ends early (not complete either, see pickAuditLog).
func (s *Supervisor) bestAuditLog(ctx context.Context) (auditLog, int, error) {
	logs := map[int]auditLog{}
	var errs []error
	for _, id := range s.AllIDs() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var l auditLog
		var err error
		if s.Running(id) {
			l, err = s.auditLog(cctx, id)
		} else {
			l, err = readJournalFile(filepath.Join(s.DataDir(id), "audit-journal.jsonl"))
		}
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		logs[id] = l
	}
	id := pickAuditLog(logs)
	if id == 0 {
		return auditLog{}, 0, fmt.Errorf("no member served its log: %w", errors.Join(errs...))
	}
	return logs[id], id, nil
}

// pickAuditLog chooses among the members' logs (see bestAuditLog); ties go
// to the lowest id, so the choice does not depend on map order. 0: none.
// A log complete from index 1 that ends before another log's last command
// (a removed member's, or one that lags) is not complete: absence from it
// proves nothing, as with a snapshot's gap. It is marked so in logs.
func pickAuditLog(logs map[int]auditLog) int {
	var last uint64
	for _, l := range logs {
		if n := len(l.Commands); n > 0 {
			last = max(last, l.Commands[n-1].Index)
		}
	}
	for id, l := range logs {
		if n := len(l.Commands); l.Complete && (n == 0 && last > 0 || n > 0 && l.Commands[n-1].Index < last) {
			l.Complete = false
			logs[id] = l
		}
	}
	best := 0
	better := func(a, b auditLog) bool {
		if a.Complete != b.Complete {
			return a.Complete
		}
		return len(a.Commands) > len(b.Commands)
	}
	for id, l := range logs {
		if b, ok := logs[best]; !ok || better(l, b) || (!better(b, l) && id < best) {
			best = id
		}
	}
	return best
}

// readJournalFile reads an audit journal a member left on disk (JSON
// Lines of applied entries, as node's journal writes them; a torn last
// line is skipped, the first copy of an index kept) as /debug/log would
// serve it: complete when it holds every index from 1 to its last.
func readJournalFile(path string) (auditLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return auditLog{}, err
	}
	defer f.Close()
	type entry struct {
		Index    uint64               `json:"index"`
		Commands []checker.LogCommand `json:"commands"`
	}
	entries := map[uint64]entry{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var e entry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Index == 0 {
			continue
		}
		if _, dup := entries[e.Index]; !dup {
			entries[e.Index] = e
		}
	}
	if err := sc.Err(); err != nil {
		return auditLog{}, fmt.Errorf("%s: %w", path, err)
	}
	idx := slices.Sorted(maps.Keys(entries))
	out := auditLog{Complete: len(idx) == 0 || idx[0] == 1 && idx[len(idx)-1] == uint64(len(idx))}
	for _, i := range idx {
		out.Commands = append(out.Commands, entries[i].Commands...)
	}
	return out, nil
}

// auditLog fetches member id's applied log.
func (s *Supervisor) auditLog(ctx context.Context, id int) (auditLog, error) {
	var out auditLog
	resp, err := memberRequest(ctx, "GET", s.node(id).http, "/debug/log", nil)
	if err != nil {
		return out, fmt.Errorf("node %d: /debug/log: %w", id, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("node %d: /debug/log: %w", id, err)
	}
	return out, nil
}

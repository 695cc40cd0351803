package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

// Resolution says whether an acquire whose outcome the client never learnt
// (info) happened, read from the committed log after the run.
type Resolution struct {
	Index    int64  `json:"index"` // the acquire's invoke event
	Happened bool   `json:"happened"`
	Token    uint64 `json:"token,omitempty"`
}

// auditLog is what a member's GET /debug/log returns (the fields used here).
type auditLog struct {
	Complete bool           `json:"complete"`
	Commands []auditCommand `json:"commands"`
}

type auditCommand struct {
	Op     string `json:"op"`
	Tag    uint64 `json:"tag"`
	Status string `json:"status"`
	Token  uint64 `json:"token"`
}

// bestAuditLog asks every member for its applied log and returns the one
// to audit against: a complete one (its journal covers every applied entry
// from index 1), else the longest, which then says complete=false. A member
// that installed a snapshot from the leader has a gap; another may not.
func (s *Supervisor) bestAuditLog(ctx context.Context) (auditLog, int, error) {
	logs := map[int]auditLog{}
	var errs []error
	for _, id := range s.IDs() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := s.auditLog(cctx, id)
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
func pickAuditLog(logs map[int]auditLog) int {
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

// auditLog fetches member id's applied log.
func (s *Supervisor) auditLog(ctx context.Context, id int) (auditLog, error) {
	var out auditLog
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+s.https[id]+"/debug/log", nil)
	if err != nil {
		return out, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, fmt.Errorf("node %d: /debug/log: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return out, fmt.Errorf("node %d: /debug/log: %s", id, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("node %d: /debug/log: %w", id, err)
	}
	return out, nil
}

// resolveInfo matches the history's info acquires (tagged with their invoke
// index + 1) against the committed log. An acquire found Granted happened,
// with its token; one absent from a complete, converged log (or found
// rejected) did not. Anything else stays unknown.
func resolveInfo(events []history.Event, log auditLog, converged bool) []Resolution {
	granted := map[uint64]uint64{}
	seen := map[uint64]bool{}
	for _, c := range log.Commands {
		if c.Op != "grant" || c.Tag == 0 {
			continue
		}
		seen[c.Tag] = true
		if c.Status == "Granted" {
			granted[c.Tag] = c.Token
		}
	}
	final := log.Complete && converged
	open := map[history.Process]int64{}
	var out []Resolution
	for _, e := range events {
		if e.Process == history.Nemesis || e.F != "acquire" {
			continue
		}
		switch e.Type {
		case history.Invoke:
			open[e.Process] = e.Index
			continue
		case history.Info:
			inv := open[e.Process]
			tag := uint64(inv) + 1
			switch tok, ok := granted[tag]; {
			case ok:
				out = append(out, Resolution{Index: inv, Happened: true, Token: tok})
			case seen[tag] || final:
				out = append(out, Resolution{Index: inv, Happened: false})
			}
		}
		delete(open, e.Process)
	}
	return out
}

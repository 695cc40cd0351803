package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// auditLog is what a member's GET /debug/log returns (the fields used here).
type auditLog struct {
	Complete bool           `json:"complete"`
	Commands []AuditCommand `json:"commands"`
}

// AuditCommand is one applied command with its result, as a member's
// journal records it; Tag is the history's invoke index + 1 of the request
// that proposed it (0 for the leader's own Expires and ghost releases).
type AuditCommand struct {
	Index  uint64 `json:"index"`
	Op     string `json:"op"`
	Key    string `json:"key"`
	Tag    uint64 `json:"tag,omitempty"`
	Status string `json:"status"`
	Token  uint64 `json:"token,omitempty"`
}

// CommittedLog is the log the audit settles the history against. Final:
// complete from index 1 and the members converged, so absence is evidence.
type CommittedLog struct {
	Final    bool           `json:"final"`
	Commands []AuditCommand `json:"commands"`
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

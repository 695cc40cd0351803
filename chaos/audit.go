package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

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

// auditLog fetches member id's applied log.
func (s *Supervisor) auditLog(ctx context.Context, id int) (auditLog, error) {
	var out auditLog
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+s.https[id]+"/debug/log", nil)
	if err != nil {
		return out, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return out, fmt.Errorf("node %d: /debug/log: %s", id, resp.Status)
	}
	return out, json.NewDecoder(resp.Body).Decode(&out)
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

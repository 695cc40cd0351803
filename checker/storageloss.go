package checker

import "fmt"

// StorageLoss is the evidence of the storage-loss check, from the chaos
// harness's corrupt family: each member it stopped, damaged and started
// again that did start (one that refused its data is not counted), and
// each such start that loaded a log ending before the index the member
// had applied before it stopped. Applied entries were synced (rule 8)
// and a stop loses nothing synced, so such a member started over data it
// lost instead of refusing it: it may then vote as if it had never
// voted, or acknowledge entries it no longer holds. A power cut cannot
// cause one (only what was never synced goes), so a valid run never
// shows one.
type StorageLoss struct {
	Started int
	Losses  []string
}

// checkStorageLoss: no member started over less than it had applied.
func checkStorageLoss(s *StorageLoss) Result {
	res := Result{Name: "storage-loss", Decides: true, Status: StatusOK}
	switch {
	case s == nil:
		res.Status, res.Note = StatusSkipped, "no member was restarted over damaged data (only the chaos harness's corrupt family does)"
	case len(s.Losses) > 0:
		res.Status, res.Note = StatusViolation, "a member restarted over damaged data started with less than it had applied"
		for _, l := range s.Losses {
			res.Violations = append(res.Violations, Violation{Message: l})
		}
	default:
		res.Note = fmt.Sprintf("%d member(s) started over damaged data holding everything they had applied", s.Started)
	}
	return res
}

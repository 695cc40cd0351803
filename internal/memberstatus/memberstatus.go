// Package memberstatus defines what a member says of itself: the one
// shape the member core fills (member.Status), the client protocol
// carries (wire.Status) and the HTTP /status endpoint serves as JSON.
// It sits below both so that neither imports the other.
package memberstatus

// Status is a member's self-description.
type Status struct {
	ID         uint64 `json:"id"`
	Addr       string `json:"addr"`
	Role       string `json:"role"`
	Term       uint64 `json:"term"`
	Leader     uint64 `json:"leader"`
	LeaderAddr string `json:"leader_addr,omitempty"`
	Commit     uint64 `json:"commit"`
	Applied    uint64 `json:"applied"`
	Locks      uint64 `json:"locks"`
	LastToken  uint64 `json:"last_token"`
	Digest     string `json:"digest"`
	// Voters and Learners are the configuration this member has applied
	// (optional on decode: members that predate membership changes).
	Voters   []uint64 `json:"voters,omitempty"`
	Learners []uint64 `json:"learners,omitempty"`
}

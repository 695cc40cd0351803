// Package memberstatus defines what a member says of itself and of the
// cluster's members: the shapes the member core fills (member.Status,
// member.Member), the client protocol carries (wire.Status, and
// wire.Member in the operator commands' answers) and the HTTP endpoints
// serve as JSON. It sits below both so that neither imports the other.
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

// Member is one member as the cluster records it: where its peers dial it
// and where clients reach it. Role is filled in when the member list is
// read ("voter" or "learner").
type Member struct {
	ID         uint64 `json:"id"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
	Role       string `json:"role,omitempty"`
}

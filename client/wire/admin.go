package wire

import "github.com/raftlock/raftlock/internal/memberstatus"

// The operator commands an OpAdmin request names (its JSON arguments and
// answers are below).
const (
	AdminMemberList     = "member.list"
	AdminMemberAdd      = "member.add"
	AdminMemberPromote  = "member.promote"
	AdminMemberRemove   = "member.remove"
	AdminLeaderTransfer = "leader.transfer"
	AdminSnapshotSave   = "snapshot.save"
)

// ReasonUnknownCapture starts the reason of the invalid-argument answer to
// a snapshot.save read of a capture the leader no longer holds (dropped,
// or the leader changed); the caller starts a new capture.
const ReasonUnknownCapture = "unknown snapshot capture"

// Member is one member as the cluster records it.
type Member = memberstatus.Member

// MemberList is the answer of member.list (and of the member changes,
// with the configuration after the change).
type MemberList struct {
	Members []Member `json:"members"`
	// ClusterID and Bootstrap are what a joining member needs (see
	// node.Join).
	ClusterID string   `json:"cluster_id,omitempty"`
	Bootstrap []Member `json:"bootstrap,omitempty"`
	// Unchanged (member changes only): the configuration already was what
	// the change asked for, so nothing changed (a retry of a change whose
	// answer was lost).
	Unchanged bool `json:"unchanged,omitempty"`
}

// MemberArgs are the arguments of member.add, member.promote and
// member.remove (only add takes addresses).
type MemberArgs struct {
	ID         uint64 `json:"id"`
	PeerAddr   string `json:"peer_addr,omitempty"`
	ClientAddr string `json:"client_addr,omitempty"`
}

// TransferArgs are leader.transfer's arguments: the member to hand
// leadership to (0: the most up-to-date other voter).
type TransferArgs struct {
	To uint64 `json:"to,omitempty"`
}

// TransferResult names the new leader.
type TransferResult struct {
	Leader     uint64 `json:"leader"`
	LeaderAddr string `json:"leader_addr"`
}

// RedirectHeader, set to RedirectFollow on an HTTP/JSON call (a header)
// or a gRPC call (metadata), tells a follower that the caller follows a
// redirect to the leader itself: the follower answers one (307, or
// UNAVAILABLE naming the leader) instead of relaying the call. raftlock's
// own API clients set it, to save the hop; any other caller is relayed.
const (
	RedirectHeader = "raftlock-redirect"
	RedirectFollow = "follow"
)

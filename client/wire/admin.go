package wire

// The operator commands an OpAdmin request names (its JSON arguments and
// answers are node/server's MemberArgs, MemberList and so on).
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

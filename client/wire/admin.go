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

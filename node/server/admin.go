package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/peer"
)

// adminCommand runs one operator command on s: body is its JSON
// arguments, and the value it returns is marshalled as the answer.
type adminCommand func(ctx context.Context, s *Server, body []byte) (any, error)

// adminCommands are the commands OpAdmin runs, by name.
func adminCommands() map[string]adminCommand {
	return map[string]adminCommand{
		wire.AdminMemberList:     memberList,
		wire.AdminMemberAdd:      memberChange(node.AddLearner),
		wire.AdminMemberPromote:  memberChange(node.Promote),
		wire.AdminMemberRemove:   memberChange(node.Remove),
		wire.AdminLeaderTransfer: leaderTransfer,
		wire.AdminSnapshotSave:   snapshotSave,
	}
}

func memberList(ctx context.Context, s *Server, body []byte) (any, error) {
	if err := decodeArgs(body, &struct{}{}); err != nil {
		return nil, err
	}
	ms, err := s.node.Members(ctx)
	if err != nil {
		return nil, err
	}
	return s.memberList(ms), nil
}

// memberList is the answer listing members ms.
func (s *Server) memberList(ms []node.Member) wire.MemberList {
	n := s.node
	out := wire.MemberList{Members: ms}
	if id := n.ClusterID(); id != 0 {
		out.ClusterID = peer.FormatClusterID(id)
	}
	for id, addr := range n.BootstrapPeers() {
		out.Bootstrap = append(out.Bootstrap, node.Member{ID: id, PeerAddr: addr})
	}
	slices.SortFunc(out.Bootstrap, func(a, b node.Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func memberChange(typ node.ChangeType) adminCommand {
	return func(ctx context.Context, s *Server, body []byte) (any, error) {
		var a wire.MemberArgs
		if err := decodeArgs(body, &a); err != nil {
			return nil, err
		}
		if typ != node.AddLearner && (a.PeerAddr != "" || a.ClientAddr != "") {
			return nil, &node.InvalidArgumentError{Reason: fmt.Sprintf("%s takes only a member id", typ)}
		}
		ch := node.MembershipChange{Type: typ, Member: node.Member{ID: a.ID, PeerAddr: a.PeerAddr, ClientAddr: a.ClientAddr}}
		res, err := s.node.ChangeMembership(ctx, ch)
		if err != nil {
			return nil, err
		}
		out := s.memberList(res.Members)
		out.Unchanged = res.Unchanged
		return out, nil
	}
}

func leaderTransfer(ctx context.Context, s *Server, body []byte) (any, error) {
	n := s.node
	var a wire.TransferArgs
	if err := decodeArgs(body, &a); err != nil {
		return nil, err
	}
	to, err := n.HandOver(ctx, a.To)
	if err != nil {
		return nil, err
	}
	st, err := n.Status(ctx)
	if err != nil {
		return nil, err
	}
	return wire.TransferResult{Leader: to, LeaderAddr: st.LeaderAddr}, nil
}

// admin runs req (OpAdmin) and fills resp with its answer.
func (s *Server) admin(ctx context.Context, req *wire.Request, resp *wire.Response) error {
	cmd, ok := s.adminCmds[req.Key]
	if !ok {
		return &node.InvalidArgumentError{Reason: fmt.Sprintf("unknown admin command %q", req.Key)}
	}
	out, err := cmd(ctx, s, req.Body)
	if err != nil {
		return err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode %s answer: %w", req.Key, err)
	}
	if len(b)+64 > wire.MaxFrame {
		return fmt.Errorf("%s answer of %d bytes exceeds the frame limit", req.Key, len(b))
	}
	resp.Op, resp.Body = wire.OpAdminResult, b
	return nil
}

// decodeArgs reads an admin command's JSON arguments into v; unknown
// fields are refused, so a misspelt flag never passes silently.
func decodeArgs(body []byte, v any) error {
	if len(body) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return &node.InvalidArgumentError{Reason: fmt.Sprintf("bad arguments: %v", err)}
	}
	return nil
}

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
)

// adminCommand runs one operator command: body is its JSON arguments, and
// the value it returns is marshalled as the answer.
type adminCommand func(ctx context.Context, n *node.Node, body []byte) (any, error)

// adminCommands are the commands OpAdmin runs, by name.
func adminCommands() map[string]adminCommand {
	return map[string]adminCommand{
		"snapshot.save": snapshotSave,
	}
}

// admin runs req (OpAdmin) and fills resp with its answer.
func (s *Server) admin(ctx context.Context, req *wire.Request, resp *wire.Response) error {
	cmd, ok := s.adminCmds[req.Key]
	if !ok {
		return &node.InvalidArgumentError{Reason: fmt.Sprintf("unknown admin command %q", req.Key)}
	}
	out, err := cmd(withServer(ctx, s), s.node, req.Body)
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

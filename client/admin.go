package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/raftlock/raftlock/client/wire"
)

// Admin runs an operator command on the leader (following redirects, as
// every call does): in is its JSON arguments (nil for none) and out, when
// not nil, receives its JSON answer. readOnly marks commands that change
// nothing (member.list, snapshot.save), which may be retried after a
// connection broke with the request sent; any other command whose outcome
// is unknown returns ErrOutcomeUnknown.
//
// Commands and their arguments are listed in the README's operations
// section; the CLI's member, leader and snapshot commands wrap them.
func (c *Client) Admin(ctx context.Context, command string, in, out any, readOnly bool) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode %s arguments: %w", command, err)
		}
	}
	resp, err := c.call(ctx, &wire.Request{Op: wire.OpAdmin, Key: command, Body: body}, readOnly)
	if err != nil {
		return err
	}
	if resp.Op != wire.OpAdminResult {
		return answerError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return fmt.Errorf("decode %s answer: %w", command, err)
	}
	return nil
}

package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/retry"
)

// Admin runs an operator command on the leader (following redirects, as
// every call does): in is its JSON arguments (nil for none) and out, when
// not nil, receives its JSON answer. idempotent marks commands that may
// run twice to the effect of once: those that change nothing
// (member.list, snapshot.save) and the membership changes (member.add,
// member.promote, member.remove: asked again once applied, they succeed
// without changing anything). Such a command is asked again when its
// outcome is unknown (a connection broke with the request sent, or the
// leader lost leadership before it applied) until ctx ends; any other
// command whose outcome is unknown returns ErrOutcomeUnknown.
//
// Commands and their arguments are listed in the README's operations
// section; the CLI's member, leader and snapshot commands wrap them.
func (c *Client) Admin(ctx context.Context, command string, in, out any, idempotent bool) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode %s arguments: %w", command, err)
		}
	}
	backoff := 50 * time.Millisecond
	for {
		resp, err := c.call(ctx, &wire.Request{Op: wire.OpAdmin, Key: command, Body: body}, idempotent)
		if err != nil {
			return err
		}
		if resp.Op == wire.OpOutcomeUnknown && idempotent {
			// The next leader decides it again, on a configuration that
			// has the first try or does not.
			t := time.NewTimer(retry.Jitter(backoff))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("gave up at the deadline: %w (%w)", answerError(resp), ctx.Err())
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
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
}

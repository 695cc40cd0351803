package client_test

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/nodetest"
)

// unknownOnce answers the first admin request outcome-unknown (a leader
// that lost leadership before the change applied) and every later one
// with an answer, counting the admin requests it received.
func unknownOnce(t *testing.T) (addr string, received func() int) {
	t.Helper()
	var mu sync.Mutex
	count := 0
	addr = fakeMember(t, func(_ int32, c net.Conn, next func() (wire.Request, error)) {
		for {
			req, err := next()
			if err != nil {
				return
			}
			if req.Op != wire.OpAdmin {
				continue
			}
			mu.Lock()
			count++
			n := count
			mu.Unlock()
			resp := wire.Response{ID: req.ID, Op: wire.OpAdminResult, Body: []byte(`{"members":[]}`)}
			if n == 1 {
				resp = wire.Response{ID: req.ID, Op: wire.OpOutcomeUnknown, Reason: "leadership lost"}
			}
			if _, err := c.Write(wire.AppendResponse(nil, &resp)); err != nil {
				return
			}
		}
	})
	return addr, func() int { mu.Lock(); defer mu.Unlock(); return count }
}

// An idempotent admin command (a membership change, which succeeds
// unchanged once applied) is asked again when its outcome is unknown; any
// other returns ErrOutcomeUnknown.
func TestAdminAsksAnIdempotentCommandAgainWhenItsOutcomeIsUnknown(t *testing.T) {
	ctx := nodetest.Context(t, 10*time.Second)
	addr, received := unknownOnce(t)
	if err := nodetest.Client(t, addr).Admin(ctx, "member.add", map[string]any{"id": 4}, nil, true); err != nil || received() != 2 {
		t.Fatalf("idempotent: %v after %d requests, want success after 2", err, received())
	}
	addr, received = unknownOnce(t)
	if err := nodetest.Client(t, addr).Admin(ctx, "leader.transfer", nil, nil, false); !errors.Is(err, client.ErrOutcomeUnknown) || received() != 1 {
		t.Fatalf("not idempotent: %v after %d requests, want ErrOutcomeUnknown after 1", err, received())
	}
}

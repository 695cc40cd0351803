package server_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// The client port is the entry of the key rule for the binary protocol
// (and, through Do, for the APIs): an acquire whose key is not UTF-8, or
// holds a NUL, is refused with the rule's message, and so is an owner that
// is not UTF-8; a number out of range is named as given. A key stored
// before the rule (planted here below the entries, through the node) is
// still read, listed and released there.
func TestClientPortKeepsTheKeyRuleAndServesOldKeys(t *testing.T) {
	n := oneMember(t)
	c, err := net.Dial("tcp", server.ServeLocal(t, server.New(n)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, wire.Greeting)
	r := bufio.NewReader(c)
	if err := wire.CheckGreeting(r); err != nil {
		t.Fatal(err)
	}
	var id uint64
	ask := func(req wire.Request) wire.Response {
		t.Helper()
		id++
		req.ID = id
		if _, err := c.Write(wire.AppendRequest(nil, &req)); err != nil {
			t.Fatal(err)
		}
		body, err := wire.ReadFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := wire.DecodeResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	const old = "u8/\xff\xfe"
	for _, tc := range []struct {
		req  wire.Request
		want string
	}{
		{wire.Request{Op: wire.OpAcquire, Key: old, LeaseMS: 10000}, "key must be valid UTF-8 without NUL"},
		{wire.Request{Op: wire.OpAcquire, Key: "a\x00b", LeaseMS: 10000}, "key must be valid UTF-8 without NUL"},
		{wire.Request{Op: wire.OpAcquire, Key: "k", LeaseMS: 10000, Owner: "ci-\xff"}, "owner must be valid UTF-8"},
		{wire.Request{Op: wire.OpAcquire, Key: "k", LeaseMS: 1<<64 - 1}, "lease must be 10ms..1h, got 18446744073709551615ms"},
		{wire.Request{Op: wire.OpRenew, Key: "k", Token: 1, LeaseMS: 1<<64 - 1}, "lease must be 10ms..1h, got 18446744073709551615ms"},
		{wire.Request{Op: wire.OpList, Limit: 1<<64 - 1}, "limit must be 1..1000, got 18446744073709551615"},
	} {
		if resp := ask(tc.req); resp.Op != wire.OpInvalidArgument || resp.Reason != tc.want {
			t.Errorf("%+v: answer 0x%02x %q, want invalid argument %q", tc.req, uint8(resp.Op), resp.Reason, tc.want)
		}
	}

	ctx := nodetest.Context(t, 20*time.Second)
	tok, err := n.AcquireAs(ctx, old, "before-the-rule", 10*time.Minute, 0, 0)
	if err != nil {
		t.Fatalf("planting a key from before the rule: %v", err)
	}
	if resp := ask(wire.Request{Op: wire.OpGet, Key: old}); resp.Op != wire.OpValue || !resp.Held || resp.Token != tok {
		t.Errorf("get of the old key: %+v", resp)
	}
	if resp := ask(wire.Request{Op: wire.OpList, Prefix: "u8/"}); resp.Op != wire.OpLocks || len(resp.Locks) != 1 || resp.Locks[0].Key != old {
		t.Errorf("list over the old key: %+v", resp)
	}
	if resp := ask(wire.Request{Op: wire.OpRelease, Key: old, Token: tok}); resp.Op != wire.OpReleased {
		t.Errorf("release of the old key: %+v", resp)
	}
}

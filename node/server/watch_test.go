package server_test

import (
	"testing"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// A watch on the client port: refused to a client that did not announce
// FeatureWatch and outside the ACL's read prefixes; otherwise OpWatching,
// then the events under the prefix, all under the request's id, until the
// client cancels it, while the connection goes on serving calls.
func TestWatchOnTheClientPort(t *testing.T) {
	n := oneMember(t)
	s := server.New(n)
	s.SetACL(&server.ACL{Rules: []server.Rule{{Identity: "", Prefixes: []string{"jobs/"}, Rights: []string{server.RightLock, server.RightRead}}}})
	raw := nodetest.DialRaw(t, server.ServeLocal(t, s))
	raw.Send(&wire.Request{ID: 1, Op: wire.OpWatch, Prefix: "jobs/"})
	if resp := raw.Recv(); resp.ID != 1 || resp.Op != wire.OpInvalidArgument {
		t.Fatalf("watch without FeatureWatch: id %d answer 0x%02x %s", resp.ID, uint8(resp.Op), resp.Reason)
	}
	raw.Send(&wire.Request{ID: 2, Op: wire.OpStatus, Features: wire.FeaturePermissionDenied | wire.FeatureWatch})
	raw.Send(&wire.Request{ID: 3, Op: wire.OpWatch, Prefix: "other/"})
	if resp := raw.Recv(); resp.ID != 3 || resp.Op != wire.OpPermissionDenied {
		t.Fatalf("watch outside the ACL: id %d answer 0x%02x %s", resp.ID, uint8(resp.Op), resp.Reason)
	}
	raw.Send(&wire.Request{ID: 4, Op: wire.OpWatch, Prefix: "jobs/"})
	if resp := raw.Recv(); resp.ID != 4 || resp.Op != wire.OpWatching {
		t.Fatalf("watch: id %d answer 0x%02x %s", resp.ID, uint8(resp.Op), resp.Reason)
	}
	raw.Send(&wire.Request{ID: 5, Op: wire.OpAcquire, Key: "jobs/a", LeaseMS: 10000, Owner: "ci"})
	var granted, event wire.Response
	for granted.Op == 0 || event.Op == 0 {
		switch resp := raw.Recv(); resp.ID {
		case 4:
			event = resp
		case 5:
			granted = resp
		default:
			t.Fatalf("unexpected answer %+v", resp)
		}
	}
	want := wire.Event{Key: "jobs/a", Type: wire.EventGranted, Token: granted.Token, Owner: "ci", LeaseMS: 10000, Index: event.Event.Index}
	if event.Op != wire.OpEvent || event.Event != want {
		t.Fatalf("event 0x%02x %+v, want %+v", uint8(event.Op), event.Event, want)
	}
	raw.Send(&wire.Request{ID: 4, Op: wire.OpCancel})
	raw.Send(&wire.Request{ID: 6, Op: wire.OpGet, Key: "jobs/a"})
	if resp := raw.Recv(); resp.ID != 6 || resp.Op != wire.OpValue || !resp.Held {
		t.Fatalf("get after the cancelled watch: %+v", resp)
	}
}

package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// A membership change asked again after it applied (its first answer lost:
// the outcome was unknown, or the configuration read that follows the
// change met a leader change and the client re-sent it to the next leader)
// succeeds, reported unchanged, with the configuration: an add of a member
// present at the same peer address, a remove of a removed member. An add
// at another peer address, or a remove of an id the cluster never had,
// fails.
func TestRetriedMemberChangesSucceedUnchanged(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.New(c.Endpoints(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	change := func(command string, a server.MemberArgs) (server.MemberList, error) {
		var out server.MemberList
		err := cl.Admin(ctx, command, a, &out, true)
		return out, err
	}
	has := func(l server.MemberList, id uint64, role string) bool {
		for _, m := range l.Members {
			if m.ID == id {
				return m.Role == role
			}
		}
		return role == ""
	}
	add := server.MemberArgs{ID: 4, PeerAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}
	for i, wantUnchanged := range []bool{false, true} {
		l, err := change("member.add", add)
		if err != nil || l.Unchanged != wantUnchanged || !has(l, 4, "learner") {
			t.Fatalf("add %d: %+v, %v; want member 4 a learner, unchanged %v", i+1, l, err, wantUnchanged)
		}
	}
	other := add
	other.PeerAddr = "127.0.0.1:3"
	var inv *client.InvalidArgumentError
	if _, err := change("member.add", other); !errors.As(err, &inv) {
		t.Fatalf("add at another peer address: %v, want invalid argument", err)
	}
	for i, wantUnchanged := range []bool{false, true} {
		l, err := change("member.remove", server.MemberArgs{ID: 4})
		if err != nil || l.Unchanged != wantUnchanged || !has(l, 4, "") || len(l.Members) != 3 {
			t.Fatalf("remove %d: %+v, %v; want member 4 gone, unchanged %v", i+1, l, err, wantUnchanged)
		}
	}
	if _, err := change("member.remove", server.MemberArgs{ID: 9}); !errors.As(err, &inv) {
		t.Fatalf("remove of an id the cluster never had: %v, want invalid argument", err)
	}
}

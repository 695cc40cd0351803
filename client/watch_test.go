package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/nodetest"
)

func describe(evs []client.Event) string {
	var s []string
	for _, ev := range evs {
		s = append(s, fmt.Sprintf("%s %s %d", ev.Type, ev.Key, ev.Token))
	}
	return strings.Join(s, ", ")
}

// A watch on the leader and one on a follower go on across a leader
// change (the events come from applied entries, which every member
// applies whoever leads), report the same events at the same indexes, and
// the one whose member stops ends unavailable.
func TestWatchAcrossALeaderChange(t *testing.T) {
	c, leader, cl, ctx := startWithClient(t)
	follower := c.Followers(c.Node(leader))[0].ID()
	onLeader, err := nodetest.Client(t, c.Clients[leader]).Watch(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	onFollower, err := nodetest.Client(t, c.Clients[follower]).Watch(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	g := acquire(t, ctx, cl, "jobs/a", time.Minute)
	c.TransferLeader(follower)
	if err := cl.Release(ctx, "jobs/a", g.Token); err != nil {
		t.Fatal(err)
	}
	acquire(t, ctx, cl, "jobs/b", time.Minute)
	a, b := nodetest.Receive(t, onLeader.C, 3, onLeader.Err), nodetest.Receive(t, onFollower.C, 3, onFollower.Err)
	want := fmt.Sprintf("granted jobs/a %d, released jobs/a %d, granted jobs/b %d", g.Token, g.Token, g.Token+1)
	if describe(a) != want || describe(b) != want {
		t.Fatalf("events on the old leader: %s\non the new leader: %s\nwant: %s", describe(a), describe(b), want)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("the members' events differ: %+v and %+v", a[i], b[i])
		}
	}
	c.StopMember(leader)
	for range onLeader.C {
	}
	if err := onLeader.Err(); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("the watch of a stopped member ended with %v, want ErrUnavailable", err)
	}
}

// A watch ends with its context.
func TestWatchEndsWithItsContext(t *testing.T) {
	_, _, cl, ctx := startWithClient(t)
	wctx, cancel := context.WithCancel(ctx)
	w, err := cl.Watch(wctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range w.C {
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("watch ended with %v, want its context's error", w.Err())
	}
}

// A member from before watches closes the connection at the watch's
// unknown opcode: the watch fails with ErrWatchUnsupported, and the
// client's calls, on a connection of their own, go on.
func TestWatchOnAMemberFromBeforeWatches(t *testing.T) {
	addr := fakeMember(t, func(_ int32, c net.Conn, next func() (wire.Request, error)) {
		for {
			req, err := next()
			if err != nil || req.Op == wire.OpWatch {
				return // an old member's decoder refuses the opcode and closes
			}
			resp := &wire.Response{ID: req.ID, Op: wire.OpValue}
			c.Write(wire.AppendResponse(nil, resp))
		}
	})
	cl := nodetest.Client(t, addr)
	ctx := nodetest.Context(t, 10*time.Second)
	if _, err := cl.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Watch(ctx, ""); !errors.Is(err, client.ErrWatchUnsupported) {
		t.Fatalf("watch on an old member: %v, want ErrWatchUnsupported", err)
	}
	if _, err := cl.Get(ctx, "k"); err != nil {
		t.Fatalf("a call after the failed watch: %v", err)
	}
}

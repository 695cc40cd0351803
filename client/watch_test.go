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
	"github.com/raftlock/raftlock/node"
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
// applies whoever leads) and report the same events at the same
// revisions; the one whose member stops, with no other member to go to,
// resumes when it is back and misses nothing.
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
	g = acquire(t, ctx, cl, "jobs/c", time.Minute)
	if err := c.StartMember(leader); err != nil {
		t.Fatal(err)
	}
	if got := describe(nodetest.Receive(t, onLeader.C, 1, onLeader.Err)); got != fmt.Sprintf("granted jobs/c %d", g.Token) {
		t.Fatalf("the watch of a member that stopped and came back resumed with %s, want granted jobs/c %d", got, g.Token)
	}
}

// A watch whose member stops resumes at another member after the last
// event it delivered: every event once, in order, none missed while it
// moved.
func TestWatchResumesAtAnotherMember(t *testing.T) {
	c, leader, cl, ctx := startWithClient(t)
	follower := c.Followers(c.Node(leader))[0].ID()
	watcher := nodetest.Client(t, append([]string{c.Clients[follower]}, c.Endpoints()...)...)
	w, err := watcher.Watch(ctx, "r/")
	if err != nil {
		t.Fatal(err)
	}
	if w.Member != c.Clients[follower] {
		t.Fatalf("the watch started at %s, want the follower %s", w.Member, c.Clients[follower])
	}
	var want []string
	for i := range 3 {
		g := acquire(t, ctx, cl, fmt.Sprintf("r/%d", i), time.Minute)
		want = append(want, fmt.Sprintf("granted r/%d %d", i, g.Token))
	}
	got := nodetest.Receive(t, w.C, 2, w.Err)
	c.StopMember(follower)
	for i := 3; i < 6; i++ {
		g := acquire(t, ctx, cl, fmt.Sprintf("r/%d", i), time.Minute)
		want = append(want, fmt.Sprintf("granted r/%d %d", i, g.Token))
	}
	got = append(got, nodetest.Receive(t, w.C, 4, w.Err)...)
	if describe(got) != strings.Join(want, ", ") {
		t.Fatalf("across its member's stop the watch saw:\n%s\nwant:\n%s", describe(got), strings.Join(want, ", "))
	}
	for i := 1; i < len(got); i++ {
		if !got[i-1].Revision().Before(got[i].Revision()) {
			t.Fatalf("events out of order: %v then %v", got[i-1].Revision(), got[i].Revision())
		}
	}
	select {
	case ev, ok := <-w.C:
		if ok {
			t.Fatalf("an event twice or more: %+v", ev)
		}
	case <-time.After(100 * time.Millisecond):
	}
}

// A watch resumed after a revision no member holds the events after is
// refused ErrCompacted.
func TestWatchAfterACompactedRevision(t *testing.T) {
	_, _, cl, ctx := startTunedWithClient(t, func(cfg *node.Config) { cfg.WatchHistory = 4 })
	w, err := cl.Watch(ctx, "k/")
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, ctx, cl, "k/0", time.Minute)
	first := nodetest.Receive(t, w.C, 1, w.Err)[0]
	for i := 1; i < 10; i++ {
		acquire(t, ctx, cl, fmt.Sprintf("k/%d", i), time.Minute)
	}
	nodetest.Receive(t, w.C, 9, w.Err)
	if _, err := cl.WatchAfter(ctx, "k/", first.Revision()); !errors.Is(err, client.ErrCompacted) {
		t.Fatalf("a watch after %v, past every member's history of 4: %v, want ErrCompacted", first.Revision(), err)
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

package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node/nodetest"
)

// Owners travel from the acquire to get and list, through a follower's
// redirect; a forced release frees the lock whatever its token and names
// the token it released, and the next grant's token is higher.
func TestOwnerListAndForcedRelease(t *testing.T) {
	c, _ := startCluster(t, 3)
	ctx := nodetest.Context(t, 30*time.Second)
	cl, err := client.New(c.Endpoints(), client.Options{Owner: "web-1:4242"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 5 {
		acquire(t, ctx, cl, fmt.Sprintf("jobs/%d", i), time.Minute)
	}
	other := nodetest.Client(t, c.Endpoints()...)
	g, err := other.AcquireWith(ctx, client.AcquireRequest{Key: "web/x", Lease: time.Minute, Owner: "batch-7"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := other.Get(ctx, "jobs/3")
	if err != nil || !info.Held || info.Owner != "web-1:4242" || info.RemainingMS == 0 {
		t.Fatalf("get jobs/3: %+v, %v; want held by web-1:4242", info, err)
	}
	var keys []string
	after := ""
	for {
		page, err := other.List(ctx, client.ListOptions{Prefix: "jobs/", After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Locks {
			if l.Owner != "web-1:4242" || l.Token == 0 {
				t.Fatalf("listed %+v", l)
			}
			keys = append(keys, l.Key)
		}
		if !page.More {
			break
		}
		after = page.Locks[len(page.Locks)-1].Key
	}
	if fmt.Sprint(keys) != "[jobs/0 jobs/1 jobs/2 jobs/3 jobs/4]" {
		t.Fatalf("listed %v", keys)
	}
	tok, err := cl.ForceRelease(ctx, "web/x")
	if err != nil || tok != g.Token {
		t.Fatalf("force release of web/x: token %d, %v; want %d", tok, err, g.Token)
	}
	if err := other.Release(ctx, "web/x", g.Token); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the evicted holder's release: %v, want ErrNotFound", err)
	}
	if _, err := cl.ForceRelease(ctx, "web/x"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("force release of a free key: %v, want ErrNotFound", err)
	}
	next, err := cl.Acquire(ctx, "web/x", time.Minute, 0)
	if err != nil || next.Token <= g.Token {
		t.Fatalf("next grant: %+v, %v; want a token above %d", next, err, g.Token)
	}
	var ia *client.InvalidArgumentError
	if _, err := other.List(ctx, client.ListOptions{Limit: 1001}); !errors.As(err, &ia) {
		t.Fatalf("limit 1001: %v, want an invalid argument", err)
	}
	if _, err := client.New(c.Endpoints(), client.Options{Owner: string(make([]byte, 129))}); !errors.As(err, &ia) {
		t.Fatalf("an owner of 129 bytes: %v, want an invalid argument", err)
	}
}

package apiclient_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/node/nodetest"
)

// A leader killed with a call in flight, after deciding it and before
// answering (nodetest's HoldAnswers, then KillMember): an acquire whose
// grant applied fails ErrOutcomeUnknown at once and is never sent again
// (sent again, it would meet its own grant: held), and the lock is held
// with the caller's owner, which only a read tells it; a read is sent
// again and answered by the next leader. Over gRPC the caller sees
// UNAVAILABLE without the API's Error detail, over HTTP a broken
// connection: neither is an answer of raftlock's.
func TestLeaderKilledMidCall(t *testing.T) {
	for _, p := range []struct {
		name      string
		newClient func(endpoints []string) (apiClient, error)
	}{
		{"grpc", func(eps []string) (apiClient, error) { return apiclient.NewGRPC(eps, apiclient.Options{}) }},
		{"http", func(eps []string) (apiClient, error) { return apiclient.NewHTTP(eps, apiclient.Options{}) }},
	} {
		t.Run(p.name+"/acquire", func(t *testing.T) {
			c, cl, leader := killableLeader(t, p.newClient)
			ctx := nodetest.Context(t, 60*time.Second)
			err := killMidCall(t, c, leader, "Acquire", func() error {
				_, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: "k", Lease: time.Minute, Owner: "me"})
				return err
			})
			if !errors.Is(err, client.ErrOutcomeUnknown) {
				t.Fatalf("acquire on a leader killed before it answered: %v, want ErrOutcomeUnknown", err)
			}
			info, err := cl.Get(ctx, "k")
			if err != nil || !info.Held || info.Owner != "me" {
				t.Fatalf("the lock after the kill: %+v, %v; want held by the caller's grant", info, err)
			}
		})
		t.Run(p.name+"/get", func(t *testing.T) {
			c, cl, leader := killableLeader(t, p.newClient)
			ctx := nodetest.Context(t, 60*time.Second)
			if _, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: "k", Lease: time.Minute, Owner: "me"}); err != nil {
				t.Fatal(err)
			}
			var info client.LockInfo
			err := killMidCall(t, c, leader, "Get", func() (err error) {
				info, err = cl.Get(ctx, "k")
				return err
			})
			if err != nil || !info.Held || info.Owner != "me" {
				t.Fatalf("get on a leader killed before it answered: %+v, %v; want it sent again and answered", info, err)
			}
		})
	}
}

// killableLeader starts a three-member cluster serving the API, and a
// client of newClient's that knows every member; it returns them and the
// leader's id. Elections are rare (nodetest.RareElections): the leader must still
// lead when the call reaches it, for its answer to be held.
func killableLeader(t *testing.T, newClient func([]string) (apiClient, error)) (*nodetest.Cluster, apiClient, uint64) {
	t.Helper()
	c, apis := nodetest.NewWithAPI(t, 3, nodetest.RareElections)
	leader := c.WaitLeader().ID()
	var eps []string
	for _, id := range c.IDs() {
		eps = append(eps, apis[id])
	}
	cl, err := newClient(eps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return c, cl, leader
}

// killMidCall makes call while leader holds back its answers, kills the
// leader once the call named method (Acquire, Get) ran there, and returns
// the call's error.
func killMidCall(t *testing.T, c *nodetest.Cluster, leader uint64, method string, call func() error) error {
	t.Helper()
	held := c.HoldAnswers(leader)
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case path := <-held:
		// "/raftlock.v1.Locks/Acquire" over gRPC, "/v1/acquire" over HTTP
		if !strings.HasSuffix(strings.ToLower(path), "/"+strings.ToLower(method)) {
			t.Fatalf("the leader held the answer of %s, want %s's", path, method)
		}
	case err := <-done:
		t.Fatalf("%s returned before the leader held its answer: %v", method, err)
	}
	c.KillMember(leader)
	return <-done
}

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

// Rule guarded: a member follows any leader its peers elected. A voter
// that was down while a member was added, promoted and made leader
// restarts with a log and --peers that do not name that member; it must
// still take its hello and its messages, answer it, and catch up.
func TestStaleVoterCatchesUpWithLeaderAddedWhileItWasDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c, ctx, cl := readyProcessCluster(t, 2*time.Minute)
	if _, err := cl.Acquire(ctx, "a", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	m3 := c.members[2]
	c.stop(m3)
	eps := strings.Join([]string{c.members[0].client, c.members[1].client}, ",")
	m4 := c.addJoiner(4, eps)
	c.members = append(c.members, m4)
	c.start(m4)
	waitUntil(ctx, t, "promotion", func() bool {
		code, _ := c.run("member", "promote", "--endpoints", eps, "4")
		return code == 0
	})
	eps4 := eps + "," + m4.client
	waitUntil(ctx, t, "transfer to 4", func() bool {
		code, _ := c.run("leader", "transfer", "--endpoints", eps4, "--to", "4")
		return code == 0
	})
	c.start(m3) // with --peers naming members 1 to 3 only
	cl2, err := client.New(strings.Split(eps4, ","), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	for i := range 5 {
		if _, err := cl2.Acquire(ctx, fmt.Sprintf("k%d", i), time.Hour, 0); err != nil {
			t.Fatal(err)
		}
	}
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
	defer lcancel()
	var a3, a4 float64
	caughtUp := func() bool {
		var err3, err4 error
		a3, err3 = m3.metric(lctx, "raftlock_applied_index")
		a4, err4 = m4.metric(lctx, "raftlock_applied_index")
		return err3 == nil && err4 == nil && a3 == a4 && a3 > 0
	}
	for !caughtUp() {
		select {
		case <-lctx.Done():
			t.Fatalf("member 3 applied %v, leader 4 applied %v after 20s\nmember 3 log:\n%s\nmember 4 log:\n%s", a3, a4, c.log(m3), c.log(m4))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

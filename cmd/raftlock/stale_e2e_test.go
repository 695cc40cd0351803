package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	membercore "github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/peer"
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

// Rule guarded: a joiner's first start is all or nothing. A joiner that
// crashed after seeding its store and before storing its identity (cluster
// id, incarnation) must join again when restarted with --join, not restart
// from its log as a member of no cluster (it would derive a cluster id of
// its own and be refused by every peer).
func TestJoinerThatCrashedBeforeItsIdentityJoinsAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c, ctx, cl := readyProcessCluster(t, 2*time.Minute)
	if _, err := cl.Acquire(ctx, "a", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	eps := strings.Join(c.endpoints(), ",")
	m4 := c.addJoiner(4, eps)

	// The crash: the joiner's store is seeded as its first start seeds it,
	// and the process dies before identity.json is written.
	clusterID := storedClusterID(t, filepath.Join(c.dir, "data-1"))
	dir := filepath.Join(c.dir, "data-4")
	bootstrap := map[uint64]string{}
	for _, m := range c.members {
		bootstrap[uint64(m.id)] = m.peer
	}
	cid, err := peer.ParseClusterID(clusterID)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{
		Config:     membercore.Config{ID: 4, Peers: map[uint64]string{4: m4.peer}},
		DataDir:    dir,
		ClientAddr: m4.client,
		Join:       &node.Join{ClusterID: cid, Bootstrap: bootstrap, Members: map[uint64]string{4: m4.peer}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	for _, f := range []string{"identity.json", "peers.json"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}

	c.members = append(c.members, m4)
	c.start(m4)
	jctx, jcancel := context.WithTimeout(ctx, 30*time.Second)
	defer jcancel()
	waitUntil(jctx, t, "member 4 to catch up", func() bool {
		a1, err1 := c.members[0].metric(jctx, "raftlock_applied_index")
		a4, err4 := m4.metric(jctx, "raftlock_applied_index")
		if !m4.running() {
			t.Fatalf("member 4 exited:\n%s", c.log(m4))
		}
		return err1 == nil && err4 == nil && a4 == a1 && a4 > 0
	})
	if got := storedClusterID(t, dir); got != clusterID {
		t.Fatalf("member 4 stored cluster id %s, the cluster's is %s\n%s", got, clusterID, c.log(m4))
	}
}

// storedClusterID reads the cluster id a data directory stores.
func storedClusterID(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct {
		ClusterID string `json:"cluster_id"`
	}
	if err := json.Unmarshal(b, &id); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", dir, err))
	}
	return id.ClusterID
}

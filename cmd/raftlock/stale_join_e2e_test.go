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

	membercore "github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/peer"
)

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

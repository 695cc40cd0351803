package node_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
)

// snapFiles counts the snapshot files in member id's data directory.
func snapFiles(t *testing.T, c *nodetest.Cluster, id uint64) int {
	t.Helper()
	names, err := os.ReadDir(filepath.Join(c.DataDir(id), "snap"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, e := range names {
		if strings.HasSuffix(e.Name(), ".snap") {
			n++
		}
	}
	return n
}

// A member keeps its snapshot as a base and deltas (each snapshot costs
// what changed since the last), and restores from them to the table it
// had: a whole cluster restarted from its chains converges on the digest
// it had, and a member that missed the compacted log catches up from a
// leader's chain, then writes a base of its own and restarts from it.
func TestMembersSnapshotDeltasAndRestoreFromThem(t *testing.T) {
	c := nodetest.New(t, 3, func(cfg *node.Config) { cfg.SnapshotEvery = 8; cfg.SnapshotKeep = 2 })
	l := c.WaitLeader()
	ctx := ctxT(t, 90*time.Second)
	churn := func(round int) {
		t.Helper()
		for i := range 40 {
			key := fmt.Sprintf("r%d/k%d", round, i)
			tok, err := l.Acquire(ctx, key, time.Hour, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if i%4 != 0 { // a quarter stay held; the rest come and go between snapshots
				if err := l.Release(ctx, key, tok, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Some locks held since an earlier round go: removals in a delta.
		if round > 0 {
			if info, err := l.Get(ctx, fmt.Sprintf("r%d/k0", round-1), false); err == nil && info.Held {
				if err := l.Release(ctx, fmt.Sprintf("r%d/k0", round-1), info.Token, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for round := range 3 {
		churn(round)
	}
	for _, id := range c.IDs() {
		nodetest.WaitFor(t, 20*time.Second, fmt.Sprintf("member %d keeps deltas", id), func() bool { return snapFiles(t, c, id) > 1 })
	}
	before := c.Converged(10 * time.Second)
	for _, id := range c.IDs() {
		c.StopMember(id)
	}
	for _, id := range c.IDs() {
		c.Restart(id)
	}
	l = c.WaitLeader()
	if after := c.Converged(10 * time.Second); after != before {
		t.Fatalf("digest after restarting from base and deltas %s, before %s", after, before)
	}

	lagging := c.Followers(l)[0].ID()
	c.StopMember(lagging)
	for round := 3; round < 6; round++ {
		churn(round)
	}
	n := c.Restart(lagging)
	c.Converged(20 * time.Second)
	if got := node.CounterValue(n.Metrics().SnapshotsInstalled); got < 1 {
		t.Fatalf("lagging member installed %v snapshots, want >= 1", got)
	}
	churn(6)
	nodetest.WaitFor(t, 20*time.Second, "the caught-up member's own base and delta", func() bool { return snapFiles(t, c, lagging) > 1 })
	want := c.Converged(10 * time.Second)
	c.StopMember(lagging)
	c.Restart(lagging)
	if got := c.Converged(20 * time.Second); got != want {
		t.Fatalf("digest after the caught-up member restarted %s, want %s", got, want)
	}
}

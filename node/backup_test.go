package node_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/nodetest"
)

// A backup read from the leader seeds three new data directories; the
// restored members hold every lock with its token, and the next grant's
// token is above every one in the backup.
func TestBackupSeedsARestoredCluster(t *testing.T) {
	c, l, ctx := leading(t, 3, 20*time.Second)
	held := map[string]uint64{}
	for i := range 5 {
		key := fmt.Sprintf("k%d", i)
		tok, err := l.Acquire(ctx, key, time.Hour, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		held[key] = tok
	}
	if err := l.Release(ctx, "k4", held["k4"], 0); err != nil {
		t.Fatal(err)
	}
	delete(held, "k4")
	// A follower refuses and names the leader. On a loaded machine a
	// follower may briefly know no leader (an election under way): it then
	// names none, and is asked again until it knows one.
	for _, f := range c.Followers(l) {
		for {
			var nl *node.NotLeaderError
			_, err := f.Backup(ctx)
			if !errors.As(err, &nl) {
				t.Fatalf("backup on a follower: %v, want NotLeaderError", err)
			}
			if nl.LeaderID == 0 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if nl.LeaderID == 0 || nl.LeaderID == f.ID() || nl.LeaderAddr != c.Clients[nl.LeaderID] {
				t.Fatalf("backup on follower %d: %v, want NotLeaderError naming the leader at its client address", f.ID(), err)
			}
			break
		}
	}
	l = c.WaitLeader()
	b, err := l.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Index == 0 || b.Term == 0 || b.Index != nodetest.Status(t, l).Applied {
		t.Fatalf("backup at index %d term %d; leader applied %d", b.Index, b.Term, nodetest.Status(t, l).Applied)
	}
	for _, id := range c.IDs() {
		c.StopMember(id)
		if err := os.RemoveAll(c.DataDir(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := node.SeedFromBackup(c.DataDir(1), 4, c.Peers, b.Index, b.Term, b.Table, 1000, nil); err == nil {
		t.Fatal("seeded member 4, which is not in the peers")
	}
	for _, id := range c.IDs() {
		if err := node.SeedFromBackup(c.DataDir(id), id, c.Peers, b.Index, b.Term, b.Table, 1000, nil); err != nil {
			t.Fatal(err)
		}
	}
	err = node.SeedFromBackup(c.DataDir(1), 1, c.Peers, b.Index, b.Term, b.Table, 1000, nil)
	if err == nil || !strings.Contains(err.Error(), "already holds data") {
		t.Fatalf("seeding a directory twice: %v", err)
	}
	start := time.Now()
	for _, id := range c.IDs() {
		if err := c.StartMember(id); err != nil {
			t.Fatal(err)
		}
	}
	l = c.WaitLeader()
	var last uint64
	for key, tok := range held {
		nodetest.WaitFor(t, 10*time.Second, "the restored leader to read "+key, func() bool {
			info, err := l.Get(ctx, key, false)
			if err != nil {
				return false
			}
			if !info.Held || info.Token != tok {
				t.Fatalf("%s after restore: %+v, want held with token %d", key, info, tok)
			}
			if full := time.Hour - time.Since(start); time.Duration(info.RemainingMS)*time.Millisecond < full {
				t.Fatalf("%s after restore: %v of lease left, want a full lease (at least %v)", key, time.Duration(info.RemainingMS)*time.Millisecond, full)
			}
			return true
		})
		last = max(last, tok)
	}
	if info, err := l.Get(ctx, "k4", false); err != nil || info.Held {
		t.Fatalf("k4, released before the backup: %+v, %v", info, err)
	}
	tok, err := l.Acquire(ctx, "new", time.Minute, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// k4's token was issued too, then the restore skipped 1000.
	if tok <= last+1+1000 {
		t.Fatalf("new grant's token %d, want above %d (the backup's last token and the 1000 skipped)", tok, last+1+1000)
	}
	c.Converged(10 * time.Second)
}

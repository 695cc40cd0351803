package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testbin"
)

// buildRaftlock builds the raftlock binary from this tree.
func buildRaftlock(t *testing.T) string { return testbin.Build(t, "../cmd/raftlock") }

// Three `raftlock node` processes; the leader is killed with SIGKILL; the
// lock survives with its token, the next grant gets a higher token, and the
// restarted member catches up.
func TestKillLeaderProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	sup, err := NewSupervisor(ClusterSpec{Bin: buildRaftlock(t), Dir: t.TempDir(), Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := sup.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(sup.ClientAddrs(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	g, err := cl.Acquire(ctx, "k", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	leader := sup.Leader(ctx)
	if leader == 0 {
		t.Fatal("no leader")
	}
	sup.Kill(ctx, leader)
	info, err := cl.Get(ctx, "k")
	if err != nil || !info.Held || info.Token != g.Token {
		t.Fatalf("after SIGKILL of leader %d: %+v, %v; want held by %d", leader, info, err, g.Token)
	}
	if nl := sup.Leader(ctx); nl == leader || nl == 0 {
		t.Fatalf("leader after the kill: %d", nl)
	}
	g2, err := cl.Acquire(ctx, "k2", time.Minute, 0)
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("next grant %+v, %v; want a token above %d", g2, err, g.Token)
	}
	if err := sup.StartNode(leader); err != nil {
		t.Fatal(err)
	}
	for {
		st := sup.Status(ctx)
		back, ok := st[leader]
		caught := ok && len(st) == 3
		for _, s := range st {
			caught = caught && s.Applied == back.Applied && s.Digest == back.Digest
		}
		if caught {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("restarted member %d did not catch up: %+v", leader, st)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/logstore"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// A member that took snapshots restarts: the stored commit index is never
// below the stored snapshot (raft refuses to load such a state).
func TestRestartAfterSnapshotsKeepsDigest(t *testing.T) {
	c := nodetest.New(t, 3, func(cfg *node.Config) { cfg.SnapshotEvery = 20; cfg.SnapshotKeep = 5 })
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 60*time.Second)
	for i := range 40 {
		key := fmt.Sprintf("k%d", i%3)
		tok, err := l.Acquire(ctx, key, time.Hour, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, key, tok, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Acquire(ctx, "held", time.Hour, 0, 0); err != nil {
		t.Fatal(err)
	}
	before := c.Converged(10 * time.Second)
	for _, n := range c.Nodes() {
		id := n.ID()
		if got := node.CounterValue(n.Metrics().Snapshots); got < 1 {
			t.Fatalf("member %d took %v snapshots, want >= 1", id, got)
		}
	}
	for _, id := range c.IDs() {
		c.StopMember(id)
	}
	for _, id := range c.IDs() {
		c.Restart(id) // fails the test if New refuses the stored state
	}
	c.WaitLeader()
	if after := c.Converged(10 * time.Second); after != before {
		t.Fatalf("digest after restart %s, before %s", after, before)
	}
}

// syncCheckStorage fails the test when a Ready carrying a snapshot is
// written without fsync: raft's MustSync ignores snapshots, and a follower
// that acknowledged an unsynced snapshot and crashed would later panic on
// the leader's commit index.
type syncCheckStorage struct {
	*logstore.Disk
	mu       sync.Mutex
	unsynced int
	installs int
}

func (s *syncCheckStorage) Save(hs *raftpb.HardState, es []*raftpb.Entry, snap *raftpb.Snapshot, sync bool) error {
	if !raft.IsEmptySnap(snap) {
		s.mu.Lock()
		s.installs++
		if !sync {
			s.unsynced++
		}
		s.mu.Unlock()
	}
	return s.Disk.Save(hs, es, snap, sync)
}

func TestReceivedSnapshotIsSynced(t *testing.T) {
	stores := map[uint64]*syncCheckStorage{}
	var mu sync.Mutex
	c := nodetest.New(t, 3, func(cfg *node.Config) {
		cfg.SnapshotEvery, cfg.SnapshotKeep = 20, 5
		ds, err := logstore.Open(cfg.DataDir, []uint64{1, 2, 3}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		s := &syncCheckStorage{Disk: ds}
		mu.Lock()
		stores[cfg.ID] = s
		mu.Unlock()
		cfg.Storage = s
	})
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 60*time.Second)
	lagging := c.Followers(l)[0].ID()
	c.StopMember(lagging)
	for i := range 60 {
		if _, err := l.Acquire(ctx, fmt.Sprintf("k%d", i), time.Hour, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.Restart(lagging)
	c.Converged(20 * time.Second)
	mu.Lock()
	s := stores[lagging]
	mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.installs == 0 {
		t.Fatal("the lagging member installed no snapshot")
	}
	if s.unsynced > 0 {
		t.Fatalf("%d of %d snapshot installs were written without fsync", s.unsynced, s.installs)
	}
}

// A linearizable read on a leader cut off from its quorum ends with the
// retryable ErrUnavailable within a few election timeouts, even when the
// caller set no deadline (raft drops pending ReadIndex requests silently).
func TestReadOnIsolatedLeaderEndsUnavailable(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	l := c.WaitLeader()
	for _, f := range c.Followers(l) {
		c.StopMember(f.ID())
	}
	type answer struct {
		err  error
		took time.Duration
	}
	ch := make(chan answer, 3)
	start := time.Now()
	go func() {
		_, err := l.Get(context.Background(), "k", false)
		ch <- answer{err, time.Since(start)}
	}()
	go func() {
		ch <- answer{l.Release(context.Background(), "k", 7, 0), time.Since(start)}
	}()
	go func() {
		_, err := l.Acquire(context.Background(), "held-or-not", time.Second, 0, 0)
		ch <- answer{err, time.Since(start)}
	}()
	bound := time.Duration(4*node.ConfigOf(l).ElectionTicks) * node.ConfigOf(l).TickInterval * 3 // generous for -race
	for range 3 {
		select {
		case a := <-ch:
			if a.err == nil || (!errors.Is(a.err, node.ErrUnavailable) && !errors.As(a.err, new(*node.NotLeaderError)) && !errors.Is(a.err, node.ErrOutcomeUnknown)) {
				t.Fatalf("answer on an isolated leader after %v: %v; want Unavailable or a redirect", a.took, a.err)
			}
		case <-time.After(bound):
			t.Fatalf("a call with no deadline on an isolated leader did not end within %v", bound)
		}
	}
}

func TestMaxBatchAboveCodecLimitRefused(t *testing.T) {
	_, err := node.New(node.Config{Config: member.Config{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:1"}, MaxBatch: fsm.MaxBatch + 1}, DataDir: t.TempDir()})
	if err == nil {
		t.Fatal("New accepted a MaxBatch every member would refuse to apply")
	}
}

// The audit journal outlives log compaction: after snapshots and a restart
// the member still lists every tagged grant once, and says its log is
// complete; a member that installed a snapshot from the leader says it is
// not (it never applied the entries the snapshot replaced).
func TestAuditJournalSurvivesCompactionAndRestart(t *testing.T) {
	c := nodetest.New(t, 3, func(cfg *node.Config) {
		cfg.SnapshotEvery, cfg.SnapshotKeep = 10, 2
		cfg.AuditJournal = cfg.DataDir + "/audit-journal.jsonl"
	})
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 60*time.Second)
	lagging := c.Followers(l)[0].ID()
	c.StopMember(lagging)
	const grants = 40
	for i := range grants {
		if _, err := l.Acquire(ctx, fmt.Sprintf("k%d", i), time.Hour, 0, uint64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	c.Restart(lagging)
	c.Converged(20 * time.Second)
	fs := c.Followers(l) // in id order
	stable := fs[0]
	if stable.ID() == lagging {
		stable = fs[1]
	}
	c.StopMember(stable.ID())
	stable = c.Restart(stable.ID())
	c.Converged(20 * time.Second)
	for _, n := range c.Nodes() {
		id := n.ID()
		cmds, complete, err := n.CommittedLog(context.Background())
		if err != nil {
			t.Fatalf("member %d: %v", id, err)
		}
		if id == lagging {
			if complete {
				t.Fatalf("member %d installed a snapshot but says its journal is complete", id)
			}
			continue
		}
		if !complete {
			t.Fatalf("member %d: journal incomplete after compaction and restart", id)
		}
		tags := map[uint64]int{}
		for _, cmd := range cmds {
			if cmd.Op == "grant" && cmd.Status == "Granted" {
				tags[cmd.Tag]++
			}
		}
		for i := range grants {
			if tags[uint64(1000+i)] != 1 {
				t.Fatalf("member %d lists tag %d %d times, want once", id, 1000+i, tags[uint64(1000+i)])
			}
		}
	}
}

// /healthz says 503 with the reason when the member has no leader, as
// etcd's /health does; /metrics has the leader gauge, the per-operation
// request latency and the log store's LSM statistics.
func TestHealthzAndLeaderGauge(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	l := c.WaitLeader()
	get := func(n *node.Node, path string) (int, string) {
		rec := httptest.NewRecorder()
		server.HTTPHandler(n).ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(l, "/healthz"); code != 200 {
		t.Fatalf("healthz on a healthy leader: %d %q", code, body)
	}
	srv := server.New(l)
	srv.Handle(context.Background(), &wire.Request{ID: 1, Op: wire.OpGet, Key: "k"})
	if _, body := get(l, "/metrics"); !strings.Contains(body, "raftlock_has_leader 1") ||
		!strings.Contains(body, `raftlock_request_duration_seconds_count{op="get"} 1`) {
		t.Fatalf("metrics lack the leader gauge or the request histogram:\n%s", body)
	}
	for _, name := range []string{"raftlock_storage_compaction_debt_bytes", "raftlock_storage_write_stalls_total", "raftlock_storage_flushes_total"} {
		if _, body := get(l, "/metrics"); !strings.Contains(body, "\n"+name+" ") {
			t.Errorf("metrics lack the log store's %s", name)
		}
	}
	fs := c.Followers(l) // in id order
	f := fs[0]
	for _, o := range fs[1:] {
		c.StopMember(o.ID())
	}
	c.StopMember(l.ID())
	nodetest.WaitFor(t, 10*time.Second, "the lone follower to lose its leader", func() bool {
		code, body := get(f, "/healthz")
		return code == 503 && strings.Contains(body, "no leader")
	})
	if _, body := get(f, "/metrics"); !strings.Contains(body, "raftlock_has_leader 0") {
		t.Fatal("raftlock_has_leader is not 0 on a member with no leader")
	}
}

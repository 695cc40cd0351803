package node

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
)

// A member that took snapshots restarts: the stored commit index is never
// below the stored snapshot (raft refuses to load such a state).
func TestRestartAfterSnapshotsKeepsDigest(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.SnapshotEvery = 20; cfg.SnapshotKeep = 5 })
	l := c.leader()
	ctx := ctxT(t, 60*time.Second)
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
	before := c.converged(10 * time.Second)
	for id, n := range c.nodes {
		if got := member.CounterValue(n.metrics.Snapshots); got < 1 {
			t.Fatalf("member %d took %v snapshots, want >= 1", id, got)
		}
	}
	for id := range c.peers {
		c.stop(id)
	}
	for id := range c.peers {
		c.start(id) // fails the test if New refuses the stored state
	}
	c.leader()
	if after := c.converged(10 * time.Second); after != before {
		t.Fatalf("digest after restart %s, before %s", after, before)
	}
}

// syncCheckStorage fails the test when a Ready carrying a snapshot is
// written without fsync: raft's MustSync ignores snapshots, and a follower
// that acknowledged an unsynced snapshot and crashed would later panic on
// the leader's commit index.
type syncCheckStorage struct {
	*DiskStorage
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
	return s.DiskStorage.Save(hs, es, snap, sync)
}

func TestReceivedSnapshotIsSynced(t *testing.T) {
	stores := map[uint64]*syncCheckStorage{}
	var mu sync.Mutex
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotEvery, cfg.SnapshotKeep = 20, 5
		ds, err := OpenDiskStorage(cfg.DataDir, []uint64{1, 2, 3}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		s := &syncCheckStorage{DiskStorage: ds}
		mu.Lock()
		stores[cfg.ID] = s
		mu.Unlock()
		cfg.Storage = s
	})
	l := c.leader()
	ctx := ctxT(t, 60*time.Second)
	lagging := c.followers(l)[0].ID()
	c.stop(lagging)
	for i := range 60 {
		if _, err := l.Acquire(ctx, fmt.Sprintf("k%d", i), time.Hour, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.start(lagging)
	c.converged(20 * time.Second)
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
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	for _, f := range c.followers(l) {
		c.stop(f.ID())
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
	bound := time.Duration(4*l.cfg.ElectionTicks) * l.cfg.TickInterval * 3 // generous for -race
	for range 3 {
		select {
		case a := <-ch:
			if a.err == nil || (!errors.Is(a.err, ErrUnavailable) && !errors.As(a.err, new(*NotLeaderError)) && !errors.Is(a.err, ErrOutcomeUnknown)) {
				t.Fatalf("answer on an isolated leader after %v: %v; want Unavailable or a redirect", a.took, a.err)
			}
		case <-time.After(bound):
			t.Fatalf("a call with no deadline on an isolated leader did not end within %v", bound)
		}
	}
}

func TestMaxBatchAboveCodecLimitRefused(t *testing.T) {
	_, err := New(Config{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:1"}, DataDir: t.TempDir(), MaxBatch: fsm.MaxBatch + 1})
	if err == nil {
		t.Fatal("New accepted a MaxBatch every member would refuse to apply")
	}
}

// The raft loop may call ReportSnapshot (through Send) while reportc is
// full, and it is reportc's only reader: the call must return at once, and
// the report must still arrive.
func TestReportSnapshotNeverBlocksAndIsNotLost(t *testing.T) {
	n := &Node{reportc: make(chan peerReport), stopc: make(chan struct{})}
	defer close(n.stopc)
	returned := make(chan struct{})
	go func() {
		n.ReportSnapshot(2, true)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("ReportSnapshot blocked on a full report channel")
	}
	select {
	case r := <-n.reportc:
		if r.id != 2 || !r.snapshot || !r.failed {
			t.Fatalf("report %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the snapshot report was dropped")
	}
}

// The audit journal outlives log compaction: after snapshots and a restart
// the member still lists every tagged grant once, and says its log is
// complete; a member that installed a snapshot from the leader says it is
// not (it never applied the entries the snapshot replaced).
func TestAuditJournalSurvivesCompactionAndRestart(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotEvery, cfg.SnapshotKeep = 10, 2
		cfg.AuditJournal = cfg.DataDir + "/audit-journal.jsonl"
	})
	l := c.leader()
	ctx := ctxT(t, 60*time.Second)
	lagging := c.followers(l)[0].ID()
	c.stop(lagging)
	const grants = 40
	for i := range grants {
		if _, err := l.Acquire(ctx, fmt.Sprintf("k%d", i), time.Hour, 0, uint64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	c.start(lagging)
	c.converged(20 * time.Second)
	stable := c.followers(l)[0]
	if stable.ID() == lagging {
		stable = c.followers(l)[1]
	}
	c.stop(stable.ID())
	stable = c.start(stable.ID())
	c.converged(20 * time.Second)
	for id, n := range c.nodes {
		cmds, complete, err := n.CommittedLog()
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
// etcd's /health does; /metrics has the leader gauge and the per-operation
// request latency.
func TestHealthzAndLeaderGauge(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.leader()
	get := func(n *Node, path string) (int, string) {
		rec := httptest.NewRecorder()
		n.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(l, "/healthz"); code != 200 {
		t.Fatalf("healthz on a healthy leader: %d %q", code, body)
	}
	srv := NewServer(l)
	srv.handle(context.Background(), &wire.Request{ID: 1, Op: wire.OpGet, Key: "k"})
	if _, body := get(l, "/metrics"); !strings.Contains(body, "raftlock_has_leader 1") ||
		!strings.Contains(body, `raftlock_request_duration_seconds_count{op="get"} 1`) {
		t.Fatalf("metrics lack the leader gauge or the request histogram:\n%s", body)
	}
	f := c.followers(l)[0]
	for _, o := range c.followers(l)[1:] {
		c.stop(o.ID())
	}
	c.stop(l.ID())
	waitFor(t, 10*time.Second, "the lone follower to lose its leader", func() bool {
		code, body := get(f, "/healthz")
		return code == 503 && strings.Contains(body, "no leader")
	})
	if _, body := get(f, "/metrics"); !strings.Contains(body, "raftlock_has_leader 0") {
		t.Fatal("raftlock_has_leader is not 0 on a member with no leader")
	}
}

// A journal line cut by a kill is dropped on open, so the next
// incarnation's first line is read back.
func TestAuditJournalDropsTornTail(t *testing.T) {
	path := t.TempDir() + "/journal"
	j, err := openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	j.add(journalEntry{Index: 1, Term: 1})
	j.flush()
	j.f.WriteString(`{"index":2,"te`) // torn by a kill
	j.close()
	j, err = openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	j.add(journalEntry{Index: 2, Term: 1})
	j.flush()
	j.close()
	if _, complete, err := readJournal(path, 2); err != nil || !complete {
		t.Fatalf("journal after a torn tail: complete=%v err=%v", complete, err)
	}
}

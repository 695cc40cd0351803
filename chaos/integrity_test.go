package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
)

// The snapshot-integrity evidence comes from the members' metrics, summed
// over each member's processes: a member that counted a corrupt snapshot
// fails the run, unless the garbage nemesis forged at least as many
// undecodable snapshots at it.
func TestSnapshotIntegrityFromScrapedMetrics(t *testing.T) {
	var corrupt atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE raftlock_snapshots_corrupt_total counter\nraftlock_snapshots_corrupt_total %d\n", corrupt.Load())
	}))
	defer srv.Close()
	clean := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "raftlock_snapshots_corrupt_total 0")
	}))
	defer clean.Close()
	sup := &Supervisor{spec: ClusterSpec{Nodes: 2}, stats: newStatsTracker(),
		nodes: map[int]*memberProc{1: {id: 1, http: clean.Listener.Addr().String()}, 2: {id: 2, http: srv.Listener.Addr().String()}}}
	ctx := context.Background()
	sup.stats.Started(1)
	sup.stats.Started(2)
	corrupt.Store(1)
	for _, id := range []int{1, 2} {
		if _, err := sup.Metrics(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	sup.stats.Started(2) // member 2 restarted: its counter starts again
	corrupt.Store(1)
	if _, err := sup.Metrics(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got := sup.Stats().SnapshotsCorrupt; got != 2 {
		t.Fatalf("snapshots_corrupt %d over two processes of member 2, want 2", got)
	}

	events := []history.Event{
		{Index: 0, Time: 1, Process: 1, Type: history.Invoke, F: "get", Key: "k1"},
		{Index: 1, Time: 2, Process: 1, Type: history.OK, F: "get", Key: "k1", Value: history.Value{Held: history.Ptr(false)}},
	}
	verdict := func(garbage bool, forged int) *checker.Verdict {
		nem := &Nemesis{}
		for range forged {
			nem.Garbage.noteUndecodable(2)
		}
		si := snapshotIntegrity(sup, nem, garbage)
		return checker.Check(events, checker.Options{SnapshotIntegrity: &checker.SnapshotIntegrity{Corrupt: si.Corrupt, Forged: si.Forged}})
	}
	v := verdict(false, 0)
	r := result(t, v, "snapshot-integrity")
	if v.ExitCode != checker.ExitViolation || r.Status != checker.StatusViolation || len(r.Violations) != 1 ||
		!strings.Contains(r.Violations[0].Message, "member 2 received 2 snapshot(s)") {
		t.Fatalf("no garbage: exit %d, %+v; want a violation naming member 2 and its 2", v.ExitCode, r)
	}
	if v := verdict(true, 2); v.ExitCode != checker.ExitValid {
		t.Fatalf("garbage forged 2 at member 2: exit %d, %+v", v.ExitCode, result(t, v, "snapshot-integrity"))
	}
	if v := verdict(true, 1); v.ExitCode != checker.ExitViolation {
		t.Fatalf("garbage forged 1 at member 2, which counted 2: exit %d", v.ExitCode)
	}
}

func result(t *testing.T, v *checker.Verdict, name string) checker.Result {
	t.Helper()
	for _, r := range v.Checks {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no %s check in %+v", name, v.Checks)
	return checker.Result{}
}

// With held locks the members snapshot by entries in small chunks under a
// frame limit above raft's largest append, unless the flags say otherwise;
// without, the members keep their defaults.
func TestTransferSettings(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want Transfer
	}{
		{Config{}, Transfer{}},
		{Config{SnapshotChunkSize: 4096}, Transfer{ChunkSize: 4096}},
		{Config{Held: 10}, Transfer{ChunkSize: heldChunkSize, FrameLimit: heldFrameLimit, ByEntries: true}},
		{Config{Held: 10, SnapshotChunkSize: 1 << 20, PeerFrameLimit: 8 << 20}, Transfer{ChunkSize: 1 << 20, FrameLimit: 8 << 20, ByEntries: true}},
	} {
		if got := tc.cfg.Transfer(); got != tc.want {
			t.Errorf("%+v: %+v, want %+v", tc.cfg, got, tc.want)
		}
	}
	if heldFrameLimit < minPeerFrameLimit {
		t.Fatalf("the held runs' frame limit %d is under the least the harness accepts, %d", heldFrameLimit, minPeerFrameLimit)
	}
	base := Config{Nodes: 3, Clients: 1, Keys: 1, Time: time.Second, LeaseMin: time.Second, LeaseMax: time.Second,
		FaultInterval: time.Second, FaultDuration: time.Second, SnapshotEvery: 100}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Held = -1 },
		func(c *Config) { c.Held, c.KeySize = 1, 0 },
		func(c *Config) { c.Held, c.KeySize = 1, 257 },
		func(c *Config) { c.PeerFrameLimit = 256 << 10 },
	} {
		c := base
		bad(&c)
		if c.Validate() == nil {
			t.Errorf("%+v was accepted", c)
		}
	}
	if c := base; c.Validate() != nil {
		t.Errorf("a run without held locks needs no key size: %v", c.Validate())
	}
	if k := heldKey(7, 250); len(k) != 250 || !strings.HasPrefix(k, heldPrefix) {
		t.Errorf("held key %q: %d bytes", k, len(k))
	}
}

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
)

const exposition = `# HELP raftlock_snapshots_total Snapshots taken and log compactions done.
# TYPE raftlock_snapshots_total counter
raftlock_snapshots_total 12
# TYPE raftlock_snapshots_installed_total counter
raftlock_snapshots_installed_total 3
raftlock_first_index 1.2345e+06
raftlock_applied_index 1234599
raftlock_client_requests_total{op="acquire",result="ok"} 99
raftlock_snapshots_total_bogus 7
raftlock_snapshots_corrupt_total 2
`

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	want := MemberMetrics{Snapshots: 12, Installed: 3, FirstIndex: 1234500, Applied: 1234599, Corrupt: 2}
	if m != want {
		t.Fatalf("parsed %+v, want %+v", m, want)
	}
}

// Counters restart from zero with each member process: the total is the
// sum over incarnations of each one's highest reading, and a reading that
// may have come from either side of a restart is not counted.
func TestStatsSumIncarnations(t *testing.T) {
	st := newStatsTracker()
	for _, id := range []int{1, 2, 3} {
		if inc := st.Started(id); inc != 1 {
			t.Fatalf("first start of %d is incarnation %d", id, inc)
		}
	}
	st.Observe(1, 1, MemberMetrics{Snapshots: 3, Installed: 1})
	st.Observe(1, 1, MemberMetrics{Snapshots: 2}) // an older reading answered late
	st.Observe(2, 1, MemberMetrics{Snapshots: 4})
	if inc := st.Started(1); inc != 2 { // node 1 killed and restarted
		t.Fatalf("restart of 1 is incarnation %d", inc)
	}
	if st.Observe(1, 1, MemberMetrics{Snapshots: 50}) {
		t.Fatal("a reading asked of incarnation 1 and answered after the restart was credited")
	}
	st.Observe(1, 2, MemberMetrics{Snapshots: 1, Installed: 2})
	st.Started(2)
	st.Started(2)
	st.Observe(2, 3, MemberMetrics{Installed: 5})
	want := ClusterStats{Restarts: 3, Snapshots: 3 + 4 + 1, SnapshotsInstalled: 1 + 2 + 5}
	if got := st.Totals(); got != want {
		t.Fatalf("totals %+v, want %+v", got, want)
	}
}

// metricsSupervisor is a Supervisor of members 1, 2, ... in their first
// incarnation, whose /metrics each answer from their handler, in order.
func metricsSupervisor(t *testing.T, metrics ...http.HandlerFunc) *Supervisor {
	s := &Supervisor{spec: ClusterSpec{Nodes: len(metrics)}, nodes: map[int]*memberProc{}, stats: newStatsTracker()}
	for i, h := range metrics {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		id := i + 1
		s.nodes[id] = &memberProc{id: id, http: srv.Listener.Addr().String()}
		s.stats.Started(id)
	}
	return s
}

// Supervisor.Metrics credits a reading to the incarnation that was current
// when it was asked for, and drops it if a restart happened meanwhile.
func TestSupervisorMetricsAcrossRestart(t *testing.T) {
	var snapshots atomic.Int64
	hold := make(chan struct{})
	held := make(chan struct{})
	var holding atomic.Bool
	s := metricsSupervisor(t, func(w http.ResponseWriter, r *http.Request) {
		if holding.Load() {
			held <- struct{}{}
			<-hold
		}
		fmt.Fprintf(w, "raftlock_snapshots_total %d\nraftlock_snapshots_installed_total 1\n", snapshots.Load())
	})
	ctx := context.Background()
	snapshots.Store(7)
	if _, err := s.Metrics(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A reading in flight while the member restarts.
	holding.Store(true)
	done := make(chan error)
	go func() {
		_, err := s.Metrics(ctx, 1)
		done <- err
	}()
	<-held
	s.stats.Started(1)
	snapshots.Store(100)
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	holding.Store(false)
	if got := s.Stats(); got != (ClusterStats{Restarts: 1, Snapshots: 7, SnapshotsInstalled: 1}) {
		t.Fatalf("after a reading raced the restart: %+v", got)
	}
	snapshots.Store(2)
	if _, err := s.Metrics(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats(); got != (ClusterStats{Restarts: 1, Snapshots: 9, SnapshotsInstalled: 2}) {
		t.Fatalf("after the new incarnation's reading: %+v", got)
	}
}

// The snapshot-integrity evidence comes from the members' metrics, summed
// over each member's processes: a member that counted a corrupt snapshot
// fails the run, unless the garbage nemesis forged at least as many
// undecodable snapshots at it.
func TestSnapshotIntegrityFromScrapedMetrics(t *testing.T) {
	var corrupt atomic.Int64
	sup := metricsSupervisor(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "raftlock_snapshots_corrupt_total 0")
	}, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE raftlock_snapshots_corrupt_total counter\nraftlock_snapshots_corrupt_total %d\n", corrupt.Load())
	})
	ctx := context.Background()
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

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

// Supervisor.Metrics credits a reading to the incarnation that was current
// when it was asked for, and drops it if a restart happened meanwhile.
func TestSupervisorMetricsAcrossRestart(t *testing.T) {
	var snapshots atomic.Int64
	hold := make(chan struct{})
	held := make(chan struct{})
	var holding atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if holding.Load() {
			held <- struct{}{}
			<-hold
		}
		fmt.Fprintf(w, "raftlock_snapshots_total %d\nraftlock_snapshots_installed_total 1\n", snapshots.Load())
	}))
	defer srv.Close()
	s := &Supervisor{spec: ClusterSpec{Nodes: 1}, nodes: map[int]*memberProc{1: {id: 1, http: srv.Listener.Addr().String()}}, stats: newStatsTracker()}
	ctx := context.Background()
	s.stats.Started(1)
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

func TestPickAuditLog(t *testing.T) {
	long := auditLog{Commands: make([]checker.LogCommand, 9)}
	short := auditLog{Commands: make([]checker.LogCommand, 3)}
	complete := auditLog{Complete: true, Commands: make([]checker.LogCommand, 5)}
	for _, tc := range []struct {
		logs map[int]auditLog
		want int
	}{
		{map[int]auditLog{}, 0},
		{map[int]auditLog{1: long, 2: complete, 3: short}, 2},
		{map[int]auditLog{1: short, 2: long, 3: long}, 2},
		{map[int]auditLog{3: complete, 2: complete}, 2},
	} {
		if got := pickAuditLog(tc.logs); got != tc.want {
			t.Errorf("pickAuditLog(%v logs) = %d, want %d", len(tc.logs), got, tc.want)
		}
	}
}

package chaos

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/raftlock/raftlock/internal/promtext"
)

// The member metrics the harness reads (GET /metrics, Prometheus text).
const (
	metricSnapshots = "raftlock_snapshots_total"
	metricInstalled = "raftlock_snapshots_installed_total"
	metricFirst     = "raftlock_first_index"
	metricApplied   = "raftlock_applied_index"
	metricRefused   = "raftlock_snapshots_refused_total"
	metricCorrupt   = "raftlock_snapshots_corrupt_total"
	// What the log store found when this process opened it (node.NoteOpened).
	metricOpenedLast    = "raftlock_storage_opened_last_index"
	metricOpenedSealed  = "raftlock_storage_opened_sealed"
	metricOpenedDropped = "raftlock_storage_opened_dropped_tails"
)

// MemberMetrics is one reading of a member's metrics.
type MemberMetrics struct {
	Snapshots  uint64 // snapshots taken by this incarnation
	Installed  uint64 // snapshots received from the leader and installed by it
	FirstIndex uint64 // first log index still stored
	Applied    uint64 // applied index
	// Refused counts snapshots received whose configuration lacks this
	// member (raft refuses them): a leader sent a newcomer a snapshot
	// older than the change that added it.
	Refused uint64
	// Corrupt counts snapshots received whose data does not decode: a
	// correct cluster never sends one, so each is a transfer that
	// delivered damaged data, or a frame the garbage nemesis forged.
	Corrupt uint64
	// OpenedLast is the last log index this process's store loaded when
	// it opened; OpenedSealed says it had stopped cleanly, and
	// DroppedTails counts the torn write-ahead log tails it dropped.
	OpenedLast   uint64
	OpenedSealed bool
	DroppedTails uint64
}

// parseMetrics reads the unlabelled samples the harness needs from a
// Prometheus text exposition.
func parseMetrics(r io.Reader) (MemberMetrics, error) {
	all, err := promtext.Parse(r)
	if err != nil {
		return MemberMetrics{}, err
	}
	return MemberMetrics{Snapshots: uint64(all[metricSnapshots]), Installed: uint64(all[metricInstalled]),
		FirstIndex: uint64(all[metricFirst]), Applied: uint64(all[metricApplied]),
		Refused: uint64(all[metricRefused]), Corrupt: uint64(all[metricCorrupt]),
		OpenedLast: uint64(all[metricOpenedLast]), OpenedSealed: all[metricOpenedSealed] == 1, DroppedTails: uint64(all[metricOpenedDropped])}, nil
}

// fetchMetrics reads the metrics served at addr.
func fetchMetrics(ctx context.Context, addr string) (MemberMetrics, error) {
	resp, err := memberRequest(ctx, "GET", addr, "/metrics", nil)
	if err != nil {
		return MemberMetrics{}, fmt.Errorf("GET %s/metrics: %w", addr, err)
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

// ClusterStats are the cluster's restart and snapshot counts over a run.
type ClusterStats struct {
	Restarts           int `json:"restarts"`            // member starts after each member's first
	Snapshots          int `json:"snapshots"`           // snapshots taken, summed over every incarnation
	SnapshotsInstalled int `json:"snapshots_installed"` // snapshots installed from a leader, likewise
	SnapshotsRefused   int `json:"snapshots_refused"`   // snapshots refused for lacking the member, likewise
	SnapshotsCorrupt   int `json:"snapshots_corrupt"`   // snapshots received whose data does not decode, likewise
}

// statsTracker sums counters that reset whenever a member restarts. Each
// member process is an incarnation; the total is the sum over incarnations
// of the highest reading each gave (counters only grow within one). A
// reading is credited to an incarnation only if no other one started while
// it was taken (see Observe), so a poll racing a restart is never counted
// twice or against the wrong process.
type statsTracker struct {
	mu     sync.Mutex
	starts map[int]int              // member -> incarnations started so far
	best   map[[2]int]MemberMetrics // (member, incarnation) -> highest reading
}

func newStatsTracker() *statsTracker {
	return &statsTracker{starts: map[int]int{}, best: map[[2]int]MemberMetrics{}}
}

// Started notes a new incarnation of member id and returns its number
// (1 for the first start).
func (t *statsTracker) Started(id int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.starts[id]++
	return t.starts[id]
}

// Incarnation is member id's latest incarnation (0: never started).
func (t *statsTracker) Incarnation(id int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.starts[id]
}

// Observe credits m to incarnation inc of member id, if inc is still the
// latest: a reading asked for while inc ran and received after a restart
// may have come from either process, and is dropped. The caller takes inc
// with Incarnation before sending the request.
func (t *statsTracker) Observe(id, inc int, m MemberMetrics) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if inc == 0 || t.starts[id] != inc {
		return false
	}
	k := [2]int{id, inc}
	b := t.best[k]
	b.Snapshots = max(b.Snapshots, m.Snapshots)
	b.Installed = max(b.Installed, m.Installed)
	b.Refused = max(b.Refused, m.Refused)
	b.Corrupt = max(b.Corrupt, m.Corrupt)
	t.best[k] = b
	return true
}

// Totals sums the counts.
func (t *statsTracker) Totals() ClusterStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s ClusterStats
	for _, n := range t.starts {
		s.Restarts += max(n-1, 0)
	}
	for _, m := range t.best {
		s.Snapshots += int(m.Snapshots)
		s.SnapshotsInstalled += int(m.Installed)
		s.SnapshotsRefused += int(m.Refused)
		s.SnapshotsCorrupt += int(m.Corrupt)
	}
	return s
}

// Member sums member id's counts over its incarnations.
func (t *statsTracker) Member(id int) MemberMetrics {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out MemberMetrics
	for k, m := range t.best {
		if k[0] == id {
			out.Snapshots += m.Snapshots
			out.Installed += m.Installed
			out.Refused += m.Refused
			out.Corrupt += m.Corrupt
		}
	}
	return out
}

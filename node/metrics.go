package node

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are one member's Prometheus metrics, in a registry of its own so
// that several members can share a process (tests, the simulator).
type Metrics struct {
	Registry *prometheus.Registry

	proposals, fsyncs, entriesPersisted, entriesApplied prometheus.Counter
	commandsApplied, leaderChanges, snapshots           prometheus.Counter
	ghostReleases, snapshotsInstalled                   prometheus.Counter
	fsyncSeconds, batchSize                             prometheus.Histogram
	applied, locksHeld, waiters, isLeader, term         prometheus.Gauge
	commit, applyLag, firstIndex                        prometheus.Gauge
	// ClientRequests counts client calls by operation and result, and
	// RequestSeconds times them; the client server records both.
	ClientRequests *prometheus.CounterVec
	RequestSeconds *prometheus.HistogramVec
	hasLeader      prometheus.Gauge
}

func newMetrics() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "raftlock", Name: name, Help: help})
		m.Registry.MustRegister(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "raftlock", Name: name, Help: help})
		m.Registry.MustRegister(g)
		return g
	}
	m.proposals = counter("proposals_total", "Log entries proposed by this member.")
	m.fsyncs = counter("fsyncs_total", "Synced writes of the raft log.")
	m.entriesPersisted = counter("entries_persisted_total", "Log entries written to the raft log.")
	m.entriesApplied = counter("entries_applied_total", "Committed log entries applied.")
	m.commandsApplied = counter("commands_applied_total", "Lock commands applied (an entry carries a batch).")
	m.leaderChanges = counter("leader_changes_total", "Times the known leader changed.")
	m.snapshots = counter("snapshots_total", "Snapshots taken and log compactions done.")
	m.ghostReleases = counter("ghost_releases_total", "Releases proposed for grants whose requester was gone.")
	m.snapshotsInstalled = counter("snapshots_installed_total", "Snapshots received from the leader and installed.")
	m.fsyncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "raftlock", Name: "fsync_seconds",
		Help: "Latency of synced raft log writes.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "raftlock", Name: "batch_commands",
		Help: "Commands per proposed log entry.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)})
	m.Registry.MustRegister(m.fsyncSeconds, m.batchSize)
	m.applied = gauge("applied_index", "Highest applied log index.")
	m.commit = gauge("commit_index", "Highest log index known committed.")
	m.firstIndex = gauge("first_index", "First log index still stored; a follower behind it needs a snapshot.")
	m.applyLag = gauge("apply_lag_entries", "Committed entries not yet applied.")
	m.locksHeld = gauge("locks_held", "Locks in the applied table.")
	m.waiters = gauge("waiters", "Acquires queued on this leader.")
	m.isLeader = gauge("is_leader", "1 when this member is the leader.")
	m.term = gauge("term", "Current raft term.")
	m.ClientRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "raftlock", Name: "client_requests_total",
		Help: "Client requests by operation and result."}, []string{"op", "result"})
	m.RequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "raftlock", Name: "request_duration_seconds",
		Help: "Latency of client requests by operation, as the member sees it.", Buckets: prometheus.ExponentialBuckets(100e-6, 2, 18)}, []string{"op"})
	m.hasLeader = gauge("has_leader", "1 when this member knows a leader.")
	m.Registry.MustRegister(m.ClientRequests, m.RequestSeconds)
	m.Registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// raftLogger routes etcd-raft's logging into slog; raft's chatter goes to
// debug level.
type raftLogger struct{ log *slog.Logger }

func (l raftLogger) Debug(v ...any)              { l.log.Debug(fmt.Sprint(v...)) }
func (l raftLogger) Debugf(f string, v ...any)   { l.log.Debug(fmt.Sprintf(f, v...)) }
func (l raftLogger) Info(v ...any)               { l.log.Debug(fmt.Sprint(v...)) }
func (l raftLogger) Infof(f string, v ...any)    { l.log.Debug(fmt.Sprintf(f, v...)) }
func (l raftLogger) Warning(v ...any)            { l.log.Warn(fmt.Sprint(v...)) }
func (l raftLogger) Warningf(f string, v ...any) { l.log.Warn(fmt.Sprintf(f, v...)) }
func (l raftLogger) Error(v ...any)              { l.log.Error(fmt.Sprint(v...)) }
func (l raftLogger) Errorf(f string, v ...any)   { l.log.Error(fmt.Sprintf(f, v...)) }
func (l raftLogger) Fatal(v ...any)              { l.Panic(v...) }
func (l raftLogger) Fatalf(f string, v ...any)   { l.Panicf(f, v...) }
func (l raftLogger) Panic(v ...any)              { s := fmt.Sprint(v...); l.log.Error(s); panic(s) }
func (l raftLogger) Panicf(f string, v ...any)   { s := fmt.Sprintf(f, v...); l.log.Error(s); panic(s) }

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

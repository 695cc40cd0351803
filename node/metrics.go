package node

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node/logstore"
)

// Metrics are one member's Prometheus metrics, in a registry of its own so
// that several members can share a process (tests). It is the member
// core's member.Meter: the core counts, the node exports.
type Metrics struct {
	Registry *prometheus.Registry

	Proposals, Fsyncs, EntriesPersisted, EntriesApplied prometheus.Counter
	CommandsApplied, LeaderChanges, Snapshots           prometheus.Counter
	GhostReleases, SnapshotsInstalled                   prometheus.Counter
	OrphanGrantsApplied                                 prometheus.Counter
	SnapshotsRefused, SnapshotsCorrupt                  prometheus.Counter
	FsyncSeconds, BatchSize, SnapshotSeconds            prometheus.Histogram
	Applied, LocksHeld, Waiters, IsLeader, Term         prometheus.Gauge
	Commit, ApplyLag, FirstIndex                        prometheus.Gauge
	SnapshotParts, SnapshotDeltaBytes                   prometheus.Gauge
	// ClientRequests counts client calls by operation and result, and
	// RequestSeconds times them; the client server records both.
	ClientRequests *prometheus.CounterVec
	// Forwarded counts the API calls a follower relayed to the leader,
	// by op and the answer it handed back.
	Forwarded      *prometheus.CounterVec
	RequestSeconds *prometheus.HistogramVec
	HasLeader      prometheus.Gauge
	// AcceptErrors counts failed accepts by listener (client, peer, api, metrics,
	// http); a listener retries them with a backoff.
	AcceptErrors *prometheus.CounterVec
	// ConnectionsRefused counts connections closed by a limit, by listener
	// and limit (what a slow or flooding source ran into).
	ConnectionsRefused *prometheus.CounterVec
	// IdentityRefusals counts calls, watches and connections refused
	// because one client identity reached its share, by limit.
	IdentityRefusals *prometheus.CounterVec

	// The core's counters and gauges by their member names.
	counters [member.NumCounters]prometheus.Counter
	gauges   [member.NumGauges]prometheus.Gauge
}

// NewMetrics returns a member's metrics in a registry of their own; with
// process, the Go runtime and process collectors are registered too (one
// member per process).
func NewMetrics(process bool) *Metrics {
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
	// The core's counters and gauges, by the member.Counter or
	// member.Gauge each one is.
	counters := [member.NumCounters]named[prometheus.Counter]{
		member.Proposals:           {&m.Proposals, "proposals_total", "Log entries proposed by this member."},
		member.EntriesApplied:      {&m.EntriesApplied, "entries_applied_total", "Committed log entries applied."},
		member.CommandsApplied:     {&m.CommandsApplied, "commands_applied_total", "Lock commands applied (an entry carries a batch)."},
		member.LeaderChanges:       {&m.LeaderChanges, "leader_changes_total", "Times the known leader changed."},
		member.GhostReleases:       {&m.GhostReleases, "ghost_releases_total", "Releases proposed for grants whose requester was gone."},
		member.OrphanGrantsApplied: {&m.OrphanGrantsApplied, "orphan_grants_applied_total", "Grants applied whose requester had left before their proposer stopped leading (released as ghosts only where no other leader can have shown them)."},
		member.SnapshotsInstalled:  {&m.SnapshotsInstalled, "snapshots_installed_total", "Snapshots received from the leader and installed."},
		member.SnapshotsRefused:    {&m.SnapshotsRefused, "snapshots_refused_total", "Snapshots received whose configuration lacks this member, which raft refuses (a new member then waits for the next one)."},
		member.SnapshotsCorrupt:    {&m.SnapshotsCorrupt, "snapshots_corrupt_total", "Snapshots received from a peer whose data does not decode (refused before raft sees them). A cluster never sends one: a non-zero count means a transfer delivered damaged data, or a forged frame."},
	}
	register(m.counters[:], counters[:], counter)
	gauges := [member.NumGauges]named[prometheus.Gauge]{
		member.AppliedIndex: {&m.Applied, "applied_index", "Highest applied log index."},
		member.CommitIndex:  {&m.Commit, "commit_index", "Highest log index known committed."},
		member.ApplyLag:     {&m.ApplyLag, "apply_lag_entries", "Committed entries not yet applied."},
		member.LocksHeld:    {&m.LocksHeld, "locks_held", "Locks in the applied table."},
		member.Waiters:      {&m.Waiters, "waiters", "Acquires queued on this leader."},
		member.IsLeader:     {&m.IsLeader, "is_leader", "1 when this member is the leader."},
		member.HasLeader:    {&m.HasLeader, "has_leader", "1 when this member knows a leader."},
		member.Term:         {&m.Term, "term", "Current raft term."},
	}
	register(m.gauges[:], gauges[:], gauge)
	// The driver's own.
	m.Fsyncs = counter("fsyncs_total", "Synced writes of the raft log.")
	m.EntriesPersisted = counter("entries_persisted_total", "Log entries written to the raft log.")
	m.Snapshots = counter("snapshots_total", "Snapshots taken and log compactions done.")
	m.FirstIndex = gauge("first_index", "First log index still stored; a follower behind it needs a snapshot.")
	m.SnapshotParts = gauge("snapshot_parts", "Files the stored snapshot is kept in: a base with the whole table, then the deltas since (1: one whole snapshot).")
	m.SnapshotDeltaBytes = gauge("snapshot_delta_bytes", "Bytes of the stored snapshot's deltas; the base is written again once they reach one to two times the table.")
	m.FsyncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "raftlock", Name: "fsync_seconds",
		Help: "Latency of synced raft log writes.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)})
	m.BatchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "raftlock", Name: "batch_commands",
		Help: "Commands per proposed log entry.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)})
	m.SnapshotSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "raftlock", Name: "snapshot_seconds",
		Help: "Time to encode and store a snapshot, off the member's loop.", Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16)})
	m.Registry.MustRegister(m.FsyncSeconds, m.BatchSize, m.SnapshotSeconds)
	m.ClientRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "raftlock", Name: "client_requests_total",
		Help: "Client requests by operation and result."}, []string{"op", "result"})
	m.RequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "raftlock", Name: "request_duration_seconds",
		Help: "Latency of client requests by operation, as the member sees it.", Buckets: prometheus.ExponentialBuckets(100e-6, 2, 18)}, []string{"op"})
	m.Forwarded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "raftlock", Name: "forwarded_calls_total",
		Help: "API calls this member, a follower, relayed to the leader, by operation and the answer handed back."}, []string{"op", "result"})
	m.Registry.MustRegister(m.ClientRequests, m.RequestSeconds, m.Forwarded)
	m.AcceptErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "raftlock", Name: "accept_errors_total",
		Help: "Failed accepts by listener (client, peer, api, http): the listener backs off and accepts again."}, []string{"listener"})
	m.ConnectionsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "raftlock", Name: "connections_refused_total",
		Help: "Connections closed by a limit, by listener and limit."}, []string{"listener", "limit"})
	m.IdentityRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "raftlock", Name: "identity_limit_refusals_total",
		Help: "Connections, calls and watches refused because one client identity held its share, by limit."}, []string{"limit"})
	m.Registry.MustRegister(m.AcceptErrors, m.ConnectionsRefused, m.IdentityRefusals)
	if process {
		m.Registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	}
	return m
}

// named is one of the core's metrics: the field of Metrics that holds it,
// and its name and help.
type named[M any] struct {
	dst        *M
	name, help string
}

// register makes each metric of defs with newMetric, into its field and into
// byCore, the core's metrics in the order of their member names.
func register[M any](byCore []M, defs []named[M], newMetric func(name, help string) M) {
	for i, d := range defs {
		*d.dst = newMetric(d.name, d.help)
		byCore[i] = *d.dst
	}
}

// Add implements member.Meter.
func (m *Metrics) Add(c member.Counter, n uint64) { m.counters[c].Add(float64(n)) }

// Set implements member.Meter.
func (m *Metrics) Set(g member.Gauge, v float64) { m.gauges[g].Set(v) }

// ObserveBatch implements member.Meter.
func (m *Metrics) ObserveBatch(commands int) { m.BatchSize.Observe(float64(commands)) }

// WatchStorage exports the log store's LSM statistics, read by read at
// each scrape.
func (m *Metrics) WatchStorage(read func() logstore.StorageStats) {
	m.Registry.MustRegister(newStorageCollector(read))
}

// CounterValue reads a counter (tests, reports).
func CounterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// GaugeValue reads a gauge (tests, reports).
func GaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return 0
	}
	return m.GetGauge().GetValue()
}

// storageCollector exports the log store's LSM statistics, read once per
// scrape: compactions after a large fill, and the write stalls they cause,
// are where a synced append's latency comes from when it is not the fsync.
type storageCollector struct {
	read    func() logstore.StorageStats
	metrics []storageMetric
}

// storageMetric is one exported statistic: its description, whether it
// is a counter, and its value in a reading.
type storageMetric struct {
	desc    *prometheus.Desc
	counter bool
	value   func(logstore.StorageStats) float64
}

func newStorageCollector(read func() logstore.StorageStats) *storageCollector {
	def := func(name, help string, counter bool, value func(logstore.StorageStats) float64) storageMetric {
		return storageMetric{prometheus.NewDesc("raftlock_"+name, help, nil, nil), counter, value}
	}
	return &storageCollector{read: read, metrics: []storageMetric{
		def("storage_compactions_in_progress", "Compactions of the log store's LSM running now.", false,
			func(s logstore.StorageStats) float64 { return float64(s.CompactionsInProgress) }),
		def("storage_compaction_debt_bytes", "Bytes the log store's LSM has left to compact before it is stable (pebble's estimate; 0 when settled).", false,
			func(s logstore.StorageStats) float64 { return float64(s.CompactionDebtBytes) }),
		def("storage_l0_files", "Files in level 0 of the log store's LSM.", false,
			func(s logstore.StorageStats) float64 { return float64(s.L0Files) }),
		def("storage_l0_sublevels", "Sublevels of level 0 (its read amplification); pebble stalls writes when they pile up.", false,
			func(s logstore.StorageStats) float64 { return float64(s.L0Sublevels) }),
		def("storage_compactions_total", "Compactions of the log store's LSM done.", true,
			func(s logstore.StorageStats) float64 { return float64(s.Compactions) }),
		def("storage_flushes_total", "Memtable flushes of the log store.", true,
			func(s logstore.StorageStats) float64 { return float64(s.Flushes) }),
		def("storage_write_stalls_total", "Times the log store stalled writes, waiting for a flush or a compaction.", true,
			func(s logstore.StorageStats) float64 { return float64(s.WriteStalls) }),
		def("storage_write_stall_seconds_total", "Time writes of the log store waited in stalls.", true,
			func(s logstore.StorageStats) float64 { return s.WriteStallSeconds }),
		def("storage_disk_bytes", "Bytes of the log store's files on disk (snapshot files not included).", false,
			func(s logstore.StorageStats) float64 { return float64(s.DiskBytes) }),
	}}
}

// Describe implements prometheus.Collector.
func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector: one reading for every metric.
func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	for _, m := range c.metrics {
		typ := prometheus.GaugeValue
		if m.counter {
			typ = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(m.desc, typ, m.value(s))
	}
}

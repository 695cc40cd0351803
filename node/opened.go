package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftlock/raftlock/node/logstore"
)

// NoteOpened exports what the log store found when it opened, once per
// process: the last index it loaded, whether it had stopped cleanly (its
// seal matched), and the write-ahead log tails it dropped as torn. The
// chaos harness reads them after a restart over damaged data: a member
// that had applied an index before it stopped must load at least that
// far, or it started over lost data (the storage-loss check).
func (m *Metrics) NoteOpened(r logstore.OpenReport) {
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "raftlock", Name: name, Help: help})
		g.Set(v)
		m.Registry.MustRegister(g)
	}
	sealed := 0.0
	if r.Sealed {
		sealed = 1
	}
	gauge("storage_opened_last_index", "Last raft log index the log store loaded when this process opened it.", float64(r.LastIndex))
	gauge("storage_opened_sealed", "1 when the log store had stopped cleanly and held what its clean-stop seal said.", sealed)
	gauge("storage_opened_dropped_tails", "Write-ahead logs whose torn tail (or damage, under the planted bug damaged-log-trusted) the log store dropped when this process opened it.", float64(len(r.Dropped)))
}

package member

import (
	"fmt"
	"log/slog"
	"sync/atomic"
)

// A Meter receives what the core counts and measures, on the core's
// goroutine, as it happens. The driver exports it (the node as Prometheus
// metrics, node/metrics.go); the core knows no metrics library.
type Meter interface {
	// Add adds n to counter c.
	Add(c Counter, n uint64)
	// Set sets gauge g to v.
	Set(g Gauge, v float64)
	// ObserveBatch records the commands one proposed entry carries.
	ObserveBatch(commands int)
}

// Counter names what a Meter counts.
type Counter int

// The counters of a member core.
const (
	Proposals           Counter = iota // log entries proposed by this member
	EntriesApplied                     // committed log entries applied
	CommandsApplied                    // lock commands applied (an entry carries a batch)
	LeaderChanges                      // times the known leader changed
	GhostReleases                      // releases proposed for grants whose requester was gone
	OrphanGrantsApplied                // grants applied whose requester left before their proposer stopped leading
	SnapshotsInstalled                 // snapshots received from the leader and installed
	SnapshotsRefused                   // snapshots whose configuration lacks this member (raft refuses them)
	SnapshotsCorrupt                   // snapshots from a peer whose data does not decode
	NumCounters                        // the number of counters
)

// Gauge names a value a Meter holds.
type Gauge int

// The gauges of a member core.
const (
	AppliedIndex Gauge = iota // highest applied log index
	CommitIndex               // highest log index known committed
	ApplyLag                  // committed entries not yet applied
	LocksHeld                 // locks in the applied table
	Waiters                   // acquires queued on this leader
	IsLeader                  // 1 when this member is the leader
	HasLeader                 // 1 when this member knows a leader
	Term                      // current raft term
	NumGauges                 // the number of gauges
)

// Tally is a Meter that keeps the counters and gauges for reading from
// any goroutine (the simulator, tests, a core without a driver's meter).
type Tally struct {
	counters [NumCounters]atomic.Uint64
	gauges   [NumGauges]atomic.Int64
}

// Add implements Meter.
func (t *Tally) Add(c Counter, n uint64) { t.counters[c].Add(n) }

// Set implements Meter; the value is kept as an integer (every gauge of
// the core is one).
func (t *Tally) Set(g Gauge, v float64) { t.gauges[g].Store(int64(v)) }

// ObserveBatch implements Meter; a Tally keeps no distributions.
func (t *Tally) ObserveBatch(int) {}

// Count returns counter c.
func (t *Tally) Count(c Counter) uint64 { return t.counters[c].Load() }

// Value returns gauge g.
func (t *Tally) Value(g Gauge) int64 { return t.gauges[g].Load() }

// RaftLogger routes etcd-raft's logging into slog; raft's chatter goes to
// debug level.
type RaftLogger struct{ Log *slog.Logger }

func (l RaftLogger) Debug(v ...any)              { l.Log.Debug(fmt.Sprint(v...)) }
func (l RaftLogger) Debugf(f string, v ...any)   { l.Log.Debug(fmt.Sprintf(f, v...)) }
func (l RaftLogger) Info(v ...any)               { l.Log.Debug(fmt.Sprint(v...)) }
func (l RaftLogger) Infof(f string, v ...any)    { l.Log.Debug(fmt.Sprintf(f, v...)) }
func (l RaftLogger) Warning(v ...any)            { l.Log.Warn(fmt.Sprint(v...)) }
func (l RaftLogger) Warningf(f string, v ...any) { l.Log.Warn(fmt.Sprintf(f, v...)) }
func (l RaftLogger) Error(v ...any)              { l.Log.Error(fmt.Sprint(v...)) }
func (l RaftLogger) Errorf(f string, v ...any)   { l.Log.Error(fmt.Sprintf(f, v...)) }
func (l RaftLogger) Fatal(v ...any)              { l.Panic(v...) }
func (l RaftLogger) Fatalf(f string, v ...any)   { l.Panicf(f, v...) }
func (l RaftLogger) Panic(v ...any)              { s := fmt.Sprint(v...); l.Log.Error(s); panic(s) }
func (l RaftLogger) Panicf(f string, v ...any)   { s := fmt.Sprintf(f, v...); l.Log.Error(s); panic(s) }

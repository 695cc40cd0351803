package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Session is one client's connection to a lock service.
type Session interface {
	// Lock takes key; with wait it queues (or polls) until it gets it.
	Lock(ctx context.Context, key string, wait bool) (unlock func(context.Context) error, err error)
	// Read reads key (linearizably where the service can).
	Read(ctx context.Context, key string) error
	Close() error
}

// Target is a lock service under test.
type Target interface {
	Name() string
	NewSession(ctx context.Context, i int) (Session, error)
	// PIDs are the server processes, for CPU accounting (nil: unknown).
	PIDs() []int
	// RaftStats returns raftlock's log counters (ok false for peers).
	RaftStats(ctx context.Context) (RaftStats, bool)
	Close() error
}

// RaftStats are cumulative counters: the log's from the leader, Events
// summed over every member that answered.
type RaftStats struct {
	Entries, Fsyncs, Commands, Applied float64
	Events                             ClusterEvents
}

// ClusterEvents count what happened in a cluster the bench started while
// a point was measured, summed over its members: the events that make a
// tail (a collection, a snapshot being written, a new leader, a write
// stalled behind the log store's compactions), to read beside a p99.
type ClusterEvents struct {
	GCCycles        float64 `json:"gc_cycles"`
	Snapshots       float64 `json:"snapshots"`
	SnapshotSeconds float64 `json:"snapshot_seconds"`
	LeaderChanges   float64 `json:"leader_changes"`
	WriteStalls     float64 `json:"write_stalls"`
}

// plus returns e with each count of o added, times sign.
func (e ClusterEvents) plus(o ClusterEvents, sign float64) ClusterEvents {
	return ClusterEvents{GCCycles: e.GCCycles + sign*o.GCCycles, Snapshots: e.Snapshots + sign*o.Snapshots,
		SnapshotSeconds: e.SnapshotSeconds + sign*o.SnapshotSeconds, LeaderChanges: e.LeaderChanges + sign*o.LeaderChanges,
		WriteStalls: e.WriteStalls + sign*o.WriteStalls}
}

// Run is one measured result. One op is one cycle of the workload:
// acquire + release (mixed adds a linearizable get; contended: one handoff).
type Run struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Clients  int    `json:"clients"`
	// Held is how many locks the bench held while this point ran (bench
	// --held), KeySize the bytes of its keys (0: unpadded names).
	Held             int      `json:"held"`
	KeySize          int      `json:"key_size,omitempty"`
	Rate             float64  `json:"rate,omitempty"`
	ThroughputOpsS   float64  `json:"throughput_ops_s"`
	Latency          Latency  `json:"latency_us"`
	CPUSPerKop       *float64 `json:"cpu_s_per_kop"`
	EntriesPerFsync  *float64 `json:"entries_per_fsync"`
	CommandsPerEntry *float64 `json:"commands_per_entry,omitempty"`
	// Events: on a cluster the bench started, what happened in it during
	// the measured window (with --repeat, summed over the repeats).
	Events *ClusterEvents `json:"cluster_events,omitempty"`
	WaitUS *Latency       `json:"wait_us,omitempty"` // contended: time to get the lock
	Ops    int64          `json:"ops"`
	Errors int64          `json:"errors"`
	// Spread: with bench --repeat, the measures above are medians over
	// the repeats and Spread has their lowest and highest values.
	Spread *Spread `json:"spread,omitempty"`
	hist   *Histogram
}

// Hist is the run's latency histogram.
func (r *Run) Hist() *Histogram { return r.hist }

// Measure runs spec against t, printing a progress line every 2 s.
func Measure(ctx context.Context, t Target, spec Spec, progress io.Writer) (Run, error) {
	if spec.Clients < 1 {
		return Run{}, errors.New("need at least one client")
	}
	sessions, err := openSessions(ctx, t, spec.Clients)
	if err != nil {
		return Run{}, err
	}
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	m := newMeter(spec.Clients)
	run := time.Now().UnixNano()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	if spec.Rate > 0 {
		openLoop(runCtx, &wg, spec, run, sessions, m.record)
	} else {
		for i, sess := range sessions {
			wg.Go(func() {
				for n := int64(0); runCtx.Err() == nil; n++ {
					start := time.Now()
					m.calling[i].Store(start.UnixNano())
					wait, err := spec.cycle(runCtx, sess, spec.key(run, i, n))
					m.calling[i].Store(0)
					if runCtx.Err() != nil {
						return
					}
					m.record(i, time.Since(start), wait, err)
				}
			})
		}
	}

	sleepCtx(ctx, spec.Warmup)
	cpu0, cpuErr := cpuSeconds(t.PIDs())
	rs0, haveStats := t.RaftStats(ctx)
	elapsed := m.window(ctx, spec, t.Name(), progress)
	cpu1, cpuErr2 := cpuSeconds(t.PIDs())
	rs1, haveStats2 := t.RaftStats(ctx)
	stop()
	wg.Wait()
	if err := settle(ctx, t, progress); err != nil {
		return Run{}, errors.Join(ctx.Err(), err)
	}
	if ctx.Err() != nil {
		return Run{}, ctx.Err()
	}
	r := m.result(t.Name(), spec, elapsed)
	if t.PIDs() != nil && cpuErr == nil && cpuErr2 == nil && r.Ops > 0 {
		v := (cpu1 - cpu0) / float64(r.Ops) * 1000
		r.CPUSPerKop = &v
	}
	if haveStats && haveStats2 {
		if d := rs1.Fsyncs - rs0.Fsyncs; d > 0 {
			v := (rs1.Entries - rs0.Entries) / d
			r.EntriesPerFsync = &v
		}
		if d := rs1.Applied - rs0.Applied; d > 0 {
			v := (rs1.Commands - rs0.Commands) / d
			r.CommandsPerEntry = &v
		}
		if t.PIDs() != nil {
			ev := rs1.Events.plus(rs0.Events, -1)
			r.Events = &ev
		}
	}
	return r, nil
}

// openSessions opens one session per client, or none.
func openSessions(ctx context.Context, t Target, clients int) ([]Session, error) {
	sessions := make([]Session, clients)
	for i := range sessions {
		s, err := t.NewSession(ctx, i)
		if err != nil {
			for _, o := range sessions[:i] {
				o.Close()
			}
			return nil, fmt.Errorf("%s session %d: %w", t.Name(), i, err)
		}
		sessions[i] = s
	}
	return sessions, nil
}

// settler is a Target whose locks outlive the bench's clients (raftlock:
// a cluster the bench did not start keeps them for their leases).
type settler interface {
	// settle releases what the clients may still hold once they have
	// stopped, and returns how many locks it released.
	settle(ctx context.Context) (int, error)
}

// settleTimeout bounds the release of what a run's clients left held.
const settleTimeout = 30 * time.Second

// settle releases what the run's clients left held, interrupted or not:
// a client stopped mid-cycle, an acquire answered after the run's end, or
// one whose outcome is unknown.
func settle(ctx context.Context, t Target, progress io.Writer) error {
	s, ok := t.(settler)
	if !ok {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	n, err := s.settle(sctx)
	progress = orDiscard(progress)
	if n > 0 {
		fmt.Fprintf(progress, "bench: %s: released %s the run's clients still held\n", t.Name(), countOf(n, "lock", "locks"))
	}
	if err != nil {
		fmt.Fprintf(progress, "bench: %s: some locks of the run stay held until their leases end: %v\n", t.Name(), err)
		return fmt.Errorf("release what the run held: %w", err)
	}
	return nil
}

// openLoop starts cycles at a fixed rate whatever the service does, and
// measures each from its intended start, so a stall shows in the latency
// instead of hiding in fewer requests (no coordinated omission).
func openLoop(ctx context.Context, wg *sync.WaitGroup, spec Spec, run int64, sessions []Session,
	record func(int, time.Duration, time.Duration, error)) {
	free := make(chan int, len(sessions))
	for i := range sessions {
		free <- i
	}
	interval := time.Duration(float64(time.Second) / spec.Rate)
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		for n := int64(0); ; n++ {
			intended := start.Add(time.Duration(n) * interval)
			if d := time.Until(intended); d > 0 {
				if !sleepCtx(ctx, d) {
					return
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var i int
				select {
				case i = <-free:
				case <-ctx.Done():
					return
				}
				defer func() { free <- i }()
				wait, err := spec.cycle(ctx, sessions[i], spec.key(run, i, n))
				if ctx.Err() == nil {
					record(i, time.Since(intended), wait, err)
				}
			}()
		}
	}()
}

// pollLock takes a lock on a service with no wait queue: try, and with
// wait, retry with a growing backoff (from first, up to last) until ctx ends.
func pollLock(ctx context.Context, wait bool, first, last time.Duration,
	try func() (unlock func(context.Context) error, err error)) (func(context.Context) error, error) {
	for backoff := first; ; backoff = min(2*backoff, last) {
		unlock, err := try()
		if err != nil || unlock != nil {
			return unlock, err
		}
		if !wait {
			return nil, errors.New("held")
		}
		if !sleepCtx(ctx, backoff) {
			return nil, ctx.Err()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// countOf is "1 lock" or "N locks".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Plan is one raftlock bench invocation: what it measures and where.
type Plan struct {
	// Raftlock is the cluster the bench starts (its Dir also holds etcd's
	// and Redis's data; its Nodes and Lease are theirs too). With
	// Endpoints the bench measures that running cluster instead, its
	// clients with ClientTLS.
	Raftlock  RaftlockConfig
	Endpoints []string
	ClientTLS *tls.Config
	// Compare names the peers measured after raftlock: etcd-mutex,
	// etcd-txn, redis.
	Compare []string
	// Every point is Spec with each of Workloads and each of Clients,
	// measured Repeat times (the median is kept).
	Spec      Spec
	Workloads []string
	Clients   []int
	Repeat    int
	// Held are the table sizes of bench --held, ascending: raftlock only,
	// one cluster filled on from size to size by FillClients acquires at
	// a time. CatchUp adds, on the bench's own cluster, the idle leader's
	// CPU and memory, a killed follower's catch-up and a new member's join
	// at each size.
	Held        []int
	FillClients int
	CatchUp     bool
}

// HeldLease is the lease of the held locks: the longest a member grants,
// so none expires during a run.
const HeldLease = time.Hour

// idleWindow is how long the leader's idle CPU is measured: long enough
// that a heartbeat's few system calls, a collection or the fill's last
// snapshot landing in it do not decide the figure (5 s windows of the same
// idle leader read from 2.6 % to 5.8 %).
const idleWindow = 15 * time.Second

// Run measures the plan into rep (whose Command, Machine and TLS the
// caller fills), printing progress lines to progress and warnings to log.
// An interruption (ctx ending) is not an error: it marks rep partial,
// keeping what was measured. stopSignals, if set, is called when the bench
// must release locks after an interruption, so that a second Ctrl-C stops
// it at once.
func (p Plan) Run(ctx context.Context, rep *Report, progress io.Writer, log *slog.Logger, stopSignals func()) error {
	if stopSignals == nil {
		stopSignals = func() {}
	}
	b := &planRun{plan: p, rep: rep, progress: progress, log: log, stopSignals: stopSignals}
	fmt.Fprintln(progress, "bench: measuring the floor (fsync, loopback round trip)")
	var err error
	if rep.Floor, err = MeasureFloor(ctx, p.Raftlock.Dir); err != nil {
		return fmt.Errorf("measure floor: %w", err)
	}
	if len(p.Held) > 0 {
		return b.measureHeld(ctx)
	}
	return b.measureSystems(ctx)
}

// planRun is one Plan under way: the report it fills.
type planRun struct {
	plan        Plan
	progress    io.Writer
	log         *slog.Logger
	rep         *Report
	stopSignals func()
}

// interrupted marks the report partial, saying where the run stopped.
func (b *planRun) interrupted(where string) {
	b.rep.Partial = true
	b.rep.Notes = append(b.rep.Notes, "interrupted during "+where+"; the runs listed were measured before")
	fmt.Fprintln(b.progress, "bench: interrupted during "+where+": writing what was measured, marked partial")
}

// measureSystems runs every point on raftlock and each peer compared.
func (b *planRun) measureSystems(ctx context.Context) error {
	for _, sys := range append([]string{"raftlock"}, b.plan.Compare...) {
		t, err := b.startTarget(ctx, sys)
		if err != nil {
			if ctx.Err() != nil {
				b.interrupted("the start of " + sys)
				return nil
			}
			if sys == "raftlock" {
				return err
			}
			note := fmt.Sprintf("%s skipped: %v", sys, err)
			b.rep.Notes = append(b.rep.Notes, note)
			fmt.Fprintln(b.progress, "bench:", note)
			continue
		}
		err = b.measurePoints(ctx, t, 0)
		t.Close()
		if err != nil || b.rep.Partial {
			return err
		}
	}
	return nil
}

// measurePoints runs every workload and client count on t, the table
// holding held locks; an interruption marks the report partial and
// returns nil.
func (b *planRun) measurePoints(ctx context.Context, t Target, held int) error {
	for _, w := range b.plan.Workloads {
		for _, n := range b.plan.Clients {
			spec := b.plan.Spec
			spec.Workload, spec.Clients = w, n
			where := fmt.Sprintf("%s %s c=%d", t.Name(), w, n)
			if held > 0 {
				where += fmt.Sprintf(" held=%d", held)
			}
			reps, err := b.repeatPoint(ctx, t, spec)
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if len(reps) > 0 {
				r := Combine(reps)
				r.Held = held
				b.rep.Runs = append(b.rep.Runs, r)
				if err == nil {
					fmt.Fprintf(b.progress, "bench: %-11s %-11s c=%-4d %9.0f ops/s p50 %dµs p99 %dµs%s\n",
						r.System, w, n, r.ThroughputOpsS, r.Latency.P50, r.Latency.P99, medianNote(b.plan.Repeat))
				}
			}
			if err != nil {
				b.interrupted(where)
				if len(reps) > 0 {
					// Repeats already measured are results too.
					b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("%s: %d of %d repeats", where, len(reps), b.plan.Repeat))
				}
				return nil
			}
		}
	}
	return nil
}

// repeatPoint measures spec --repeat times; on an error it returns the
// repeats measured before it.
func (b *planRun) repeatPoint(ctx context.Context, t Target, spec Spec) ([]Run, error) {
	var reps []Run
	for i := range b.plan.Repeat {
		r, err := Measure(ctx, t, spec, b.progress)
		if err != nil {
			return reps, err
		}
		if b.plan.Repeat > 1 {
			fmt.Fprintf(b.progress, "bench: %-11s %-11s c=%-4d run %d/%d %9.0f ops/s p50 %dµs p99 %dµs\n",
				r.System, spec.Workload, spec.Clients, i+1, b.plan.Repeat, r.ThroughputOpsS, r.Latency.P50, r.Latency.P99)
		}
		reps = append(reps, r)
	}
	return reps, nil
}

// medianNote marks a progress line that reports a median of repeats.
func medianNote(repeat int) string {
	if repeat == 1 {
		return ""
	}
	return fmt.Sprintf(" (median of %d)", repeat)
}

// startTarget starts (or, with Endpoints, connects to) one system.
func (b *planRun) startTarget(ctx context.Context, sys string) (Target, error) {
	p := b.plan
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	switch sys {
	case "raftlock":
		if len(p.Endpoints) > 0 {
			return RaftlockEndpoints(sctx, p.Endpoints, p.Raftlock.Lease, p.ClientTLS)
		}
		return StartRaftlock(sctx, p.Raftlock)
	case "etcd-mutex", "etcd-txn":
		return StartEtcd(sctx, EtcdConfig{Dir: p.Raftlock.Dir, Lease: p.Raftlock.Lease, Mode: sys, Nodes: p.Raftlock.Nodes})
	case "redis":
		return StartRedis(sctx, RedisConfig{Dir: p.Raftlock.Dir, Lease: p.Raftlock.Lease})
	}
	return nil, errors.New("unknown system " + sys)
}

// experimentTimeout bounds each cluster experiment of bench --held (a
// catch-up or a join at a million locks may take minutes on a slow core).
const experimentTimeout = 10 * time.Minute

// releaseTimeout bounds the release of the held locks at the end.
const releaseTimeout = 10 * time.Minute

// measureHeld runs bench --held: one raftlock cluster, filled to each
// table size in turn (ascending, on from the previous size), every point
// measured at each, with the cluster experiments between.
func (b *planRun) measureHeld(ctx context.Context) error {
	t, err := b.startTarget(ctx, "raftlock")
	if err != nil {
		if ctx.Err() != nil {
			b.interrupted("the start of raftlock")
			return nil
		}
		return err
	}
	defer t.Close()
	h, err := NewHeld(t, b.plan.Spec.KeySize, HeldLease)
	if err != nil {
		return err
	}
	b.rep.FillMode = FillIncremental
	fmt.Fprintf(b.progress, "bench: held sizes %v, filled incrementally on one cluster with %d clients, keys of %s\n",
		b.plan.Held, b.plan.FillClients, keySizeText(b.plan.Spec.KeySize))
	err = b.eachHeldSize(ctx, t, h)
	if len(b.plan.Endpoints) > 0 {
		// Not our cluster: leave it as we found it, interrupted or not.
		err = errors.Join(err, b.release(ctx, h))
	}
	return err
}

func keySizeText(n int) string {
	if n == 0 {
		return "the workloads' own names"
	}
	return fmt.Sprintf("%d bytes", n)
}

// eachHeldSize fills, measures and experiments at each held size; an
// interruption marks the report partial and returns nil.
func (b *planRun) eachHeldSize(ctx context.Context, t Target, h *Held) error {
	for _, n := range b.plan.Held {
		sp := ScalePoint{Held: n, KeySize: b.plan.Spec.KeySize}
		if n > h.Len() {
			fill, err := h.FillTo(ctx, n, b.plan.FillClients, b.progress)
			sp.Fill = &fill
			if err != nil {
				if ctx.Err() != nil {
					b.rep.Scale = append(b.rep.Scale, sp)
					b.interrupted(fmt.Sprintf("the fill to %d locks (%d held)", n, fill.Locks))
					return nil
				}
				return err
			}
			fmt.Fprintf(b.progress, "bench: fill %d locks held, %.0f acquires/s over %.2fs\n", fill.Locks, fill.RateOpsS, fill.Seconds)
			b.settle(ctx, t, &sp)
		}
		b.idleCPU(ctx, t, &sp)
		err := b.measurePoints(ctx, t, n)
		if err == nil && !b.rep.Partial && n > 0 && b.plan.CatchUp && len(b.plan.Endpoints) == 0 {
			b.clusterExperiments(ctx, t, &sp)
		}
		b.rep.Scale = append(b.rep.Scale, sp)
		if err != nil || b.rep.Partial {
			return err
		}
		if ctx.Err() != nil {
			b.interrupted(fmt.Sprintf("the experiments at %d held", n))
			return nil
		}
	}
	return nil
}

// settle waits, on a cluster the bench started, until every member has
// applied the fill, and records how long that took.
func (b *planRun) settle(ctx context.Context, t Target, sp *ScalePoint) {
	if len(b.plan.Endpoints) > 0 {
		return
	}
	ectx, cancel := context.WithTimeout(ctx, experimentTimeout)
	defer cancel()
	start := time.Now()
	if err := Settle(ectx, t); err != nil {
		b.experimentFailed(ctx, "settling after the fill", sp.Held, err)
		return
	}
	took := time.Since(start).Seconds()
	sp.SettleSeconds = &took
	fmt.Fprintf(b.progress, "bench: every member applied the fill %.2fs after it ended\n", took)
}

// idleCPU measures the leader's CPU with no load (a cluster the bench
// started, with --catch-up): at 0 held too, as the base of the ratios.
func (b *planRun) idleCPU(ctx context.Context, t Target, sp *ScalePoint) {
	if !b.plan.CatchUp || len(b.plan.Endpoints) > 0 {
		return
	}
	fmt.Fprintf(b.progress, "bench: idle leader CPU at %d held, over %v\n", sp.Held, idleWindow)
	ectx, cancel := context.WithTimeout(ctx, experimentTimeout)
	defer cancel()
	v, err := IdleLeaderCPU(ectx, t, idleWindow)
	if err != nil {
		b.experimentFailed(ctx, "idle leader CPU", sp.Held, err)
		return
	}
	sp.IdleLeaderCPU = &v
	fmt.Fprintf(b.progress, "bench: idle leader CPU at %d held: %.3f of a core\n", sp.Held, v)
	if rss, err := LeaderRSS(ectx, t); err == nil {
		sp.LeaderRSSBytes = &rss
		fmt.Fprintf(b.progress, "bench: leader resident memory at %d held: %.0f MiB\n", sp.Held, float64(rss)/(1<<20))
	} else {
		b.experimentFailed(ctx, "leader resident memory", sp.Held, err)
	}
}

// clusterExperiments times a killed follower's catch-up and a new
// member's join at sp.Held locks. A failure is a note, not the end of the
// bench: the other sizes still measure.
func (b *planRun) clusterExperiments(ctx context.Context, t Target, sp *ScalePoint) {
	// Behind by two snapshot intervals and what is kept behind one: the
	// leader has compacted past what the follower had.
	behind := 2*b.plan.Raftlock.SnapshotEvery + max(b.plan.Raftlock.SnapshotEvery/10, 1)
	fmt.Fprintf(b.progress, "bench: catch-up at %d held: a follower killed while the leader applies %d entries\n", sp.Held, behind)
	ectx, cancel := context.WithTimeout(ctx, experimentTimeout)
	c, err := CatchUp(ectx, t, behind, b.plan.Spec.KeySize)
	cancel()
	if err != nil {
		b.experimentFailed(ctx, "catch-up", sp.Held, err)
	} else {
		sp.CatchUp = &c
		fmt.Fprintf(b.progress, "bench: catch-up at %d held: member %d, %d entries behind, ready after %.2fs, caught up after %.2fs, by snapshot %v\n",
			sp.Held, c.Member, c.EntriesBehind, c.ReadySeconds, c.Seconds, c.BySnapshot)
	}
	if ctx.Err() != nil {
		return
	}
	fmt.Fprintf(b.progress, "bench: join at %d held: adding a member\n", sp.Held)
	ectx, cancel = context.WithTimeout(ctx, experimentTimeout)
	j, err := JoinMember(ectx, t)
	cancel()
	if err != nil {
		b.experimentFailed(ctx, "join", sp.Held, err)
		return
	}
	sp.Join = &j
	fmt.Fprintf(b.progress, "bench: join at %d held: member %d, %.2fs, by snapshot %v (removed again)\n", sp.Held, j.Member, j.Seconds, j.BySnapshot)
}

// experimentFailed notes a failed experiment (an interruption is not one).
func (b *planRun) experimentFailed(ctx context.Context, what string, held int, err error) {
	if ctx.Err() != nil {
		return
	}
	note := fmt.Sprintf("%s at %d held: %v", what, held, err)
	b.rep.Notes = append(b.rep.Notes, note)
	b.log.Warn("bench experiment failed", "experiment", what, "held", held, "err", err)
}

// release releases every held lock on a cluster the bench did not start.
func (b *planRun) release(ctx context.Context, h *Held) error {
	if ctx.Err() != nil {
		b.stopSignals()
		fmt.Fprintln(b.progress, "bench: releasing the held locks; Ctrl-C again leaves them held until their leases end (1h)")
	}
	n, err := h.Release(ctx, b.plan.FillClients, releaseTimeout, b.progress)
	b.rep.Released = &n
	fmt.Fprintf(b.progress, "bench: released %d held locks\n", n)
	if err != nil {
		return fmt.Errorf("release the held locks (%d released): %w", n, err)
	}
	return nil
}

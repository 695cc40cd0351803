package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/bench"
)

// experimentTimeout bounds each cluster experiment of bench --held (a
// catch-up or a join at a million locks may take minutes on a slow core).
const experimentTimeout = 10 * time.Minute

// releaseTimeout bounds the release of the held locks at the end.
const releaseTimeout = 10 * time.Minute

// measureHeld runs bench --held: one raftlock cluster, filled to each
// table size in turn (ascending, on from the previous size), every point
// measured at each, with the cluster experiments between.
func (b *benchRun) measureHeld(ctx context.Context) error {
	t, err := b.startTarget(ctx, "raftlock")
	if err != nil {
		if ctx.Err() != nil {
			b.interrupted("the start of raftlock")
			return nil
		}
		return err
	}
	defer t.Close()
	h, err := bench.NewHeld(t, b.cfg.keySize, heldLease)
	if err != nil {
		return err
	}
	b.rep.FillMode = bench.FillIncremental
	fmt.Fprintf(b.progress, "bench: held sizes %v, filled incrementally on one cluster with %d clients, keys of %s\n",
		b.cfg.held, b.cfg.fillClients, keySizeText(b.cfg.keySize))
	err = b.eachHeldSize(ctx, t, h)
	if b.cfg.endpoints != "" {
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
func (b *benchRun) eachHeldSize(ctx context.Context, t bench.Target, h *bench.Held) error {
	for _, n := range b.cfg.held {
		sp := bench.ScalePoint{Held: n, KeySize: b.cfg.keySize}
		if n > h.Len() {
			fill, err := h.FillTo(ctx, n, b.cfg.fillClients, b.progress)
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
		}
		b.idleCPU(ctx, t, &sp)
		err := b.measurePoints(ctx, t, n)
		if err == nil && !b.rep.Partial && n > 0 && b.cfg.catchUp && b.cfg.endpoints == "" {
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

// idleCPU measures the leader's CPU with no load (a cluster the bench
// started, with --catch-up): at 0 held too, as the base of the ratios.
func (b *benchRun) idleCPU(ctx context.Context, t bench.Target, sp *bench.ScalePoint) {
	if !b.cfg.catchUp || b.cfg.endpoints != "" {
		return
	}
	fmt.Fprintf(b.progress, "bench: idle leader CPU at %d held, over %v\n", sp.Held, idleWindow)
	ectx, cancel := context.WithTimeout(ctx, experimentTimeout)
	defer cancel()
	v, err := bench.IdleLeaderCPU(ectx, t, idleWindow)
	if err != nil {
		b.experimentFailed(ctx, "idle leader CPU", sp.Held, err)
		return
	}
	sp.IdleLeaderCPU = &v
	fmt.Fprintf(b.progress, "bench: idle leader CPU at %d held: %.3f of a core\n", sp.Held, v)
	if rss, err := bench.LeaderRSS(ectx, t); err == nil {
		sp.LeaderRSSBytes = &rss
		fmt.Fprintf(b.progress, "bench: leader resident memory at %d held: %.0f MiB\n", sp.Held, float64(rss)/(1<<20))
	} else {
		b.experimentFailed(ctx, "leader resident memory", sp.Held, err)
	}
}

// clusterExperiments times a killed follower's catch-up and a new
// member's join at sp.Held locks. A failure is a note, not the end of the
// bench: the other sizes still measure.
func (b *benchRun) clusterExperiments(ctx context.Context, t bench.Target, sp *bench.ScalePoint) {
	// Behind by two snapshot intervals and what is kept behind one: the
	// leader has compacted past what the follower had.
	behind := 2*b.cfg.snapshotEvery + max(b.cfg.snapshotEvery/10, 1)
	fmt.Fprintf(b.progress, "bench: catch-up at %d held: a follower killed while the leader applies %d entries\n", sp.Held, behind)
	ectx, cancel := context.WithTimeout(ctx, experimentTimeout)
	c, err := bench.CatchUp(ectx, t, behind, b.cfg.keySize)
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
	j, err := bench.JoinMember(ectx, t)
	cancel()
	if err != nil {
		b.experimentFailed(ctx, "join", sp.Held, err)
		return
	}
	sp.Join = &j
	fmt.Fprintf(b.progress, "bench: join at %d held: member %d, %.2fs, by snapshot %v (removed again)\n", sp.Held, j.Member, j.Seconds, j.BySnapshot)
}

// experimentFailed notes a failed experiment (an interruption is not one).
func (b *benchRun) experimentFailed(ctx context.Context, what string, held int, err error) {
	if ctx.Err() != nil {
		return
	}
	note := fmt.Sprintf("%s at %d held: %v", what, held, err)
	b.rep.Notes = append(b.rep.Notes, note)
	b.log.Warn("bench experiment failed", "experiment", what, "held", held, "err", err)
}

// release releases every held lock on a cluster the bench did not start.
func (b *benchRun) release(ctx context.Context, h *bench.Held) error {
	if ctx.Err() != nil {
		b.stopSignals()
		fmt.Fprintln(b.progress, "bench: releasing the held locks; Ctrl-C again leaves them held until their leases end (1h)")
	}
	n, err := h.Release(ctx, b.cfg.fillClients, releaseTimeout, b.progress)
	b.rep.Released = &n
	fmt.Fprintf(b.progress, "bench: released %d held locks\n", n)
	if err != nil {
		return fmt.Errorf("release the held locks (%d released): %w", n, err)
	}
	return nil
}

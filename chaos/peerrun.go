package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
)

// peerPhases carries out a run on a peer target (--target etcd|redis|nats):
// start the service, run the workload under the nemesis (the families
// the target supports), heal, read every key, and hand the history to
// the same checks. There is no committed log to audit, no digest to
// compare and no snapshot counter to read: those checks are skipped.
func (r *run) peerPhases(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	if err := os.MkdirAll(r.logs, 0o755); err != nil {
		return nil, err
	}
	hf, err := os.Create(filepath.Join(cfg.Out, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	r.hf = hf
	p, err := newPeer(&cfg, r.logs)
	if err != nil {
		return nil, err
	}
	r.peer = p
	if cfg.usesPower() {
		// Each server's data directory on its own lazyfs mount, made
		// before the server starts; run.close unmounts them.
		if r.power, err = mountPower(ctx, p.DataDir, p.IDs(), cfg.Seed, cfg.Log); err != nil {
			return nil, err
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = p.Start(startCtx)
	cancel()
	if err != nil {
		return r.cutOr(ctx, fmt.Sprintf("while %s started", cfg.target()), fmt.Errorf("%s never came up: %w (see %s)", cfg.target(), err, r.logs))
	}
	if r.power != nil && !cfg.PowerStrict {
		var dirs []string
		for _, id := range p.IDs() {
			dirs = append(dirs, p.DataDir(id))
		}
		if err := settleDirs(dirs); err != nil {
			return nil, err
		}
	}
	if err := r.recordPeer(p); err != nil {
		return nil, err
	}
	if err := r.workload(ctx); err != nil {
		return r.cutOr(ctx, r.workloadWhere(), err)
	}
	r.progress("chaos: workload done: healing, reading every key")
	if err := r.healPeer(ctx, p); err != nil {
		return r.cutOr(ctx, fmt.Sprintf("after the workload, while %s healed", cfg.target()), err)
	}
	finalReads(ctx, r.wl, r.keys)
	if ctx.Err() != nil {
		return r.cut(ctx, "after the workload, during the final reads")
	}
	if err := r.rec.Err(); err != nil {
		return nil, fmt.Errorf("write the history: %w", err)
	}
	r.peerCounts()
	if k := r.nem.Counts.PowerCutsFailed.Load(); k > 0 {
		return nil, fmt.Errorf("%d power cuts failed (see the log): no verdict on disks the history does not describe", k)
	}
	return &Result{Events: r.rec.Events(), Crashes: p.Crashes(), Target: cfg.target(), Unrecovered: r.unrecovered,
		Power: PowerCounts{Cuts: int(r.nem.Counts.PowerCuts.Load()), BytesDropped: r.nem.Counts.PowerBytesDropped.Load()}}, nil
}

// peerCounts prints the nemesis's client pauses and power cuts, if it
// made any.
func (r *run) peerCounts() {
	c := &r.nem.Counts
	if r.cfg.Progress == nil {
		return
	}
	if c.ClientPauses.Load() > 0 {
		fmt.Fprintf(r.cfg.Progress, "chaos: nemesis: client pauses %d (%d between a read and a write)\n", c.ClientPauses.Load(), c.ClientPausesHolding.Load())
	}
	if k := c.PowerCuts.Load() + c.PowerCutsFailed.Load(); k > 0 {
		fmt.Fprintf(r.cfg.Progress, "chaos: nemesis: power cuts %d (%d unsynced bytes dropped), power cuts failed %d\n",
			c.PowerCuts.Load(), c.PowerBytesDropped.Load(), c.PowerCutsFailed.Load())
	}
}

// cutPeer is cut for a peer target: the faults left are ended and
// recorded, and the result is what was recorded, with the crashes seen
// before the service is stopped (run.close stops it: a member that
// exits then is no crash).
func (r *run) cutPeer(where string) (*Result, error) {
	if r.nem != nil {
		r.endPeerFaults(r.peer, false)
		r.peerCounts()
	}
	if err := r.rec.Err(); err != nil {
		return nil, fmt.Errorf("write the history: %w", err)
	}
	return &Result{Events: r.rec.Events(), Crashes: r.peer.Crashes(), Target: r.cfg.target(), Interrupted: where}, nil
}

// recordPeer opens the history and sets up the workload, whose clients
// dial the peer, and the nemesis, which faults it.
func (r *run) recordPeer(p peerService) error {
	cfg := r.cfg
	if err := r.openHistory(); err != nil {
		return err
	}
	r.wl = &Workload{Clients: cfg.Clients, Keys: r.keys, LeaseMin: cfg.LeaseMin, LeaseMax: cfg.LeaseMax,
		Endpoints: p.Endpoints(), Seed: cfg.Seed, Rec: r.rec, Store: workload.NewResource(r.rec, cfg.resource()),
		Dial: peerDialer(cfg.target(), cfg.LeaseMax)}
	families, _ := cfg.nemeses()
	r.nem = &Nemesis{Rec: r.rec, Families: families, Interval: cfg.FaultInterval, Duration: cfg.FaultDuration,
		Seed: cfg.Seed, Log: cfg.Log, ClientPauseMin: p.PauseMin(cfg.LeaseMax),
		Peer: &peerFaults{p: p, rec: r.rec, stopped: map[int]bool{}, paused: map[int]bool{}}}
	r.nem.Peer.pw = peerPower{disks: r.power, counts: &r.nem.Counts, log: cfg.Log}
	return nil
}

// healPeer ends whatever fault is left (the nemesis heals each of its
// own, so normally none), records the heal, and waits for the service to
// take writes again, or for ctx to end (Ctrl-C). A service that does not
// recover is reported with the history if a member died on its own, else
// the run has no verdict.
func (r *run) healPeer(ctx context.Context, p peerService) error {
	r.endPeerFaults(p, true)
	readyCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := p.WaitReady(readyCtx); err != nil {
		cuts := r.nem.Counts.PowerCuts.Load()
		if (len(p.Crashes()) == 0 && cuts == 0) || ctx.Err() != nil {
			return fmt.Errorf("%s did not recover after healing: %w", r.cfg.target(), err)
		}
		// A target that never recovers from its power cuts is a
		// finding, not a harness failure: the history is judged as it
		// is (the final reads fail), and the verdict says so.
		r.unrecovered = fmt.Sprintf("%s took no write within 60 s of the last heal, after %d power cuts: %v", r.cfg.target(), cuts, err)
		r.cfg.Log.Error("target did not recover after healing", "err", err, "crashed", crashNote(p.Crashes()), "power_cuts", cuts)
		if r.cfg.Progress != nil {
			fmt.Fprintf(r.cfg.Progress, "chaos: %s\n", r.unrecovered)
		}
	}
	return nil
}

// endPeerFaults resumes the members the nemesis left paused, restarts
// those it left killed when restart is set (a run cut short leaves them
// down: the service is stopped next), heals every link and records it.
func (r *run) endPeerFaults(p peerService, restart bool) {
	pf := r.nem.Peer
	var resumed, started []int
	for id := range pf.paused {
		p.Resume(id)
		resumed = append(resumed, id)
		delete(pf.paused, id)
	}
	if restart {
		for id := range pf.stopped {
			p.Restart(id)
			started = append(started, id)
			delete(pf.stopped, id)
		}
	}
	slices.Sort(resumed)
	slices.Sort(started)
	if len(resumed) > 0 {
		fault.Resume{Nodes: resumed}.Record(r.rec)
	}
	if len(started) > 0 {
		fault.Start{Nodes: started}.Record(r.rec)
	}
	p.SetLinks(func(int, int) bool { return true })
	fault.Heal{}.Record(r.rec)
}

// targetLine is summary.md's line naming a peer target and what differs
// from a raftlock run.
func targetLine(t Target) string {
	switch t {
	case TargetEtcd:
		return "Target: etcd (three etcd members started by the harness, their peer links through its byte-stream proxies); " +
			"locks are etcd's concurrency recipe (a key under the lock's prefix per acquire, owned by the lowest create revision), " +
			"the fencing token the lock key's create revision. " + etcdSemantics
	case TargetRedis:
		return "Target: redis (a primary, a replica and three Sentinels started by the harness, the replication and Sentinel links through its byte-stream proxies); " +
			"locks are SET key token NX PX lease with a token check on release, the fencing token from INCR on the primary. " + redisSemantics
	case TargetNats:
		return "Target: nats (three nats-server processes in one cluster with JetStream, their routes through the harness's byte-stream proxies, " +
			"a key-value bucket replicated on all three). " + natsSemantics
	}
	return "Target: " + string(t)
}

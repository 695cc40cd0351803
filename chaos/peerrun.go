package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker/history"
)

// peerPhases carries out a run on a peer target (--target etcd|redis):
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
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = p.Start(startCtx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s never came up: %w (see %s)", cfg.target(), err, r.logs)
	}
	if err := r.recordPeer(p); err != nil {
		return nil, err
	}
	if err := r.workload(ctx); err != nil {
		return nil, err
	}
	bg := context.WithoutCancel(ctx)
	if err := r.healPeer(bg, p); err != nil {
		return nil, err
	}
	finalReads(bg, r.wl, r.keys)
	if err := r.rec.Err(); err != nil {
		return nil, fmt.Errorf("write the history: %w", err)
	}
	if c := &r.nem.Counts; cfg.Progress != nil && c.ClientPauses.Load() > 0 {
		fmt.Fprintf(cfg.Progress, "chaos: nemesis: client pauses %d (%d between a read and a write)\n", c.ClientPauses.Load(), c.ClientPausesHolding.Load())
	}
	return &Result{Events: r.rec.Events(), Crashes: p.Crashes(), Target: cfg.target()}, nil
}

// recordPeer opens the history and sets up the workload, whose clients
// dial the peer, and the nemesis, which faults it.
func (r *run) recordPeer(p peerService) error {
	cfg := r.cfg
	r.keys = workload.Keys(cfg.Keys)
	var err error
	if r.rec, err = history.NewRecorder(r.hf, cfg.header(r.keys)); err != nil {
		return err
	}
	r.wl = &Workload{Clients: cfg.Clients, Keys: r.keys, LeaseMin: cfg.LeaseMin, LeaseMax: cfg.LeaseMax,
		Endpoints: p.Endpoints(), Seed: cfg.Seed, Rec: r.rec, Store: workload.NewResource(r.rec, cfg.resource()),
		Dial: peerDialer(cfg.target())}
	families, _ := cfg.nemeses()
	r.nem = &Nemesis{Rec: r.rec, Families: families, Interval: cfg.FaultInterval, Duration: cfg.FaultDuration,
		Seed: cfg.Seed, Log: cfg.Log, ClientPauseMin: p.PauseMin(cfg.LeaseMax),
		Peer: &peerFaults{p: p, rec: r.rec, stopped: map[int]bool{}, paused: map[int]bool{}}}
	return nil
}

// healPeer ends whatever fault is left (the nemesis heals each of its
// own, so normally none), records the heal, and waits for the service to
// take writes again. A service that does not recover is reported with
// the history if a member died on its own, else the run has no verdict.
func (r *run) healPeer(ctx context.Context, p peerService) error {
	pf := r.nem.Peer
	var resumed, started []int
	for id := range pf.paused {
		p.Resume(id)
		resumed = append(resumed, id)
	}
	for id := range pf.stopped {
		p.Restart(id)
		started = append(started, id)
	}
	if len(resumed) > 0 {
		fault.Resume{Nodes: resumed}.Record(r.rec)
	}
	if len(started) > 0 {
		fault.Start{Nodes: started}.Record(r.rec)
	}
	p.SetLinks(func(int, int) bool { return true })
	fault.Heal{}.Record(r.rec)
	readyCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := p.WaitReady(readyCtx); err != nil {
		if len(p.Crashes()) == 0 {
			return fmt.Errorf("%s did not recover after healing: %w", r.cfg.target(), err)
		}
		r.cfg.Log.Error("target did not recover after healing", "err", err, "crashed", crashNote(p.Crashes()))
	}
	return nil
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
	}
	return "Target: " + string(t)
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/progress"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
)

// Config is one chaos run.
type Config struct {
	Bin     string
	Out     string // reports, history, node logs and data
	Nodes   int
	Seed    uint64
	Time    time.Duration // how long the workload runs (raftlock chaos --duration)
	Clients int
	Keys    int
	Nemeses []fault.Family
	// FaultInterval is the mean quiet time between faults, FaultDuration
	// the mean length of one.
	FaultInterval time.Duration
	FaultDuration time.Duration
	LeaseMin      time.Duration
	LeaseMax      time.Duration
	Bug           string
	// SnapshotEvery and SnapshotKeep are the members' --snapshot-every and
	// --snapshot-keep: small, so that kills land before, during and after
	// snapshots and an isolated follower soon needs one.
	SnapshotEvery uint64
	SnapshotKeep  uint64
	// Held locks (chaos --held) are taken before the workload starts, with
	// keys of KeySize bytes and a lease of an hour, and never touched: the
	// workload then runs against a big table, so every snapshot is big.
	Held    int
	KeySize int
	// SnapshotChunkSize and PeerFrameLimit are the members'
	// --snapshot-chunk-size and --peer-frame-limit; zero is the harness's
	// choice (SnapshotChunks).
	SnapshotChunkSize int
	PeerFrameLimit    int
	// Resource is what the locks guard (--resource): workload.Fenced (""
	// too, the default) or workload.Unfenced.
	Resource workload.Resource
	// ClientProcs are workload clients run as raftlock chaos-client
	// processes beside the Clients in the harness (--client-procs), so
	// the client-pause family can stop them; 0: none.
	ClientProcs int
	// Protocols are the protocols the workload's clients speak, client i
	// the i-th modulo their number (--protocols); nil: binary.
	Protocols []string
	// PinMembers keeps each API client to one member, relayed by it when
	// it follows (--pin-members).
	PinMembers bool
	// Target is the lock service tried (--target): TargetRaftlock (""
	// too, the default), TargetEtcd, TargetRedis or TargetNats.
	Target Target
	// RedisFsync is Redis's appendfsync (--redis-fsync; "": everysec),
	// NatsSync the NATS servers' JetStream sync (--nats-sync; "": the
	// server's default) and NatsServer the nats-server they run
	// (--nats-server; "": the one on PATH). target.go checks them.
	RedisFsync RedisFsync
	NatsSync   NatsSync
	NatsServer string
	// PowerStrict: with the power families on a peer target, the
	// harness does not fsync the servers' data directories once after
	// they first answer (--power-strict; settleDirs says why it does).
	PowerStrict bool
	Progress    io.Writer // one line every few seconds; nil: none
	Log         *slog.Logger
}

// Defaults returns the settings of a run nobody tuned, as `raftlock
// chaos` starts with them: three members, eight clients on three keys for
// 30 s, a fault every 3 s or so lasting 2 s, leases of 200 ms to 1 s, and
// snapshots every 100 entries keeping 20, so that kills land around
// snapshots and an isolated follower soon needs one. Its Nemeses is empty
// (Families is the default set) and Seed zero.
func Defaults() Config {
	return Config{
		Nodes:         3,
		Time:          30 * time.Second,
		Clients:       8,
		Keys:          3,
		FaultInterval: 3 * time.Second,
		FaultDuration: 2 * time.Second,
		LeaseMin:      200 * time.Millisecond,
		LeaseMax:      time.Second,
		SnapshotEvery: 100,
		SnapshotKeep:  20,
		KeySize:       250,
	}
}

// HarnessError is a failure of the harness itself (the cluster never came
// up, a bad setting): never a verdict on raftlock.
type HarnessError struct{ Err error }

func (e *HarnessError) Error() string { return "harness failed: " + e.Err.Error() }
func (e *HarnessError) Unwrap() error { return e.Err }

// Validate checks a Config.
func (c *Config) Validate() error {
	switch {
	case c.Nodes != 3 && c.Nodes != 5:
		return errors.New("--nodes must be 3 or 5")
	case c.Clients < 1 || c.Keys < 1:
		return errors.New("--clients and --keys must be at least 1")
	case c.Time <= 0:
		return errors.New("--duration must be positive")
	case c.LeaseMin < 10*time.Millisecond || c.LeaseMax < c.LeaseMin:
		return errors.New("leases must satisfy 10ms <= --lease-min <= --lease-max")
	case c.FaultInterval <= 0 || c.FaultDuration <= 0:
		return errors.New("--fault-interval and --fault-duration must be positive")
	case c.SnapshotEvery == 0:
		return errors.New("--snapshot-every must be at least 1")
	case c.Held < 0:
		return errors.New("--held must not be negative")
	case c.Held > 0 && !validKeySize(c.KeySize):
		return fmt.Errorf("--key-size must be 1 to %d bytes", wire.MaxKeyLen)
	case c.SnapshotChunkSize < 0 || c.PeerFrameLimit < 0:
		return errors.New("--snapshot-chunk-size and --peer-frame-limit must not be negative")
	case c.PeerFrameLimit > 0 && c.PeerFrameLimit < minPeerFrameLimit:
		return fmt.Errorf("--peer-frame-limit must be at least %d: raft's appends are up to 1 MiB of entries", minPeerFrameLimit)
	case c.ClientProcs < 0:
		return errors.New("--client-procs must not be negative")
	case c.Resource != "" && !slices.Contains(workload.Resources, c.Resource):
		return fmt.Errorf("unknown --resource %q (want %s)", c.Resource, joinResources())
	case !member.ValidBug(c.Bug):
		// Checked here, not by the members: a misspelt bug would start a
		// cluster that cannot come up and read as the cluster's failure.
		return fmt.Errorf("unknown --unsafe-bug %q (want one of %s)", c.Bug, strings.Join(member.Bugs(), ", "))
	}
	if err := c.validateProtocols(); err != nil {
		return err
	}
	if err := c.validateTarget(); err != nil {
		return err
	}
	for _, f := range c.Nemeses {
		if !slices.Contains(Families, f) && !slices.Contains(optIn(), f) {
			return fmt.Errorf("unknown nemesis %q (want some of %v, or of the opt-in %v)", f, Families, optIn())
		}
	}
	if c.usesPower() && (slices.Contains(c.Nemeses, fault.FamilyMembership) || slices.Contains(c.Nemeses, fault.FamilyCorrupt)) {
		// A newcomer's data directory would not be on a mount, and a
		// replaced member's mount would stay: not yet carried out. The
		// corrupt family adds newcomers too (a member that refuses its
		// damaged data is replaced).
		return errors.New("--nemesis power and power-all do not run with membership or corrupt yet")
	}
	return nil
}

// resource is the run's resource mode: Fenced unless Unfenced was asked.
func (c *Config) resource() workload.Resource {
	if c.Resource == "" {
		return workload.Fenced
	}
	return c.Resource
}

// joinResources lists the resource modes as --resource takes them.
func joinResources() string {
	parts := make([]string, len(workload.Resources))
	for i, r := range workload.Resources {
		parts[i] = string(r)
	}
	return strings.Join(parts, "|")
}

// settingsNotes are what a run's history header and summary.md add to say
// how it differs from a default run; nil for a run whose reports are as
// they were before these settings existed.
func (c *Config) settingsNotes() (header map[string]any, lines []string) {
	header = map[string]any{}
	if t := c.target(); t != TargetRaftlock {
		header["target"] = string(t)
		lines = append(lines, c.targetLines(header)...)
	}
	if r := c.resource(); r != workload.Fenced {
		header["resource"] = string(r)
		lines = append(lines, "Resource: unfenced, a read-sleep-write register that accepts every write whatever its token: "+
			"a client that lost its lock overwrites, and the fenced-resource check is expected to find it under pauses.")
	}
	if c.ClientProcs > 0 {
		header["client_procs"] = c.ClientProcs
		lines = append(lines, fmt.Sprintf("Client processes: %d raftlock chaos-client processes beside the %d clients in the harness, numbered in one history with them.",
			c.ClientProcs, c.Clients))
	}
	if _, notRun := c.nemeses(); len(notRun) > 0 {
		header["nemeses_not_run"] = notRun
		lines = append(lines, notRunLine(c, notRun))
	}
	lines = c.protocolNotes(header, lines)
	if len(header) == 0 {
		return nil, nil
	}
	return header, lines
}

// nemeses splits the families asked for into those the run carries out
// and those it cannot: client-pause without client processes, and what
// the target cannot do (notCarried). The latter are named in the header
// and summary.md, never dropped silently.
func (c *Config) nemeses() (run, notRun []fault.Family) {
	for _, f := range c.Nemeses {
		if c.notCarried(f) != "" {
			notRun = append(notRun, f)
			continue
		}
		run = append(run, f)
	}
	return run, notRun
}

// The members' snapshot transfer settings of a run with held locks: small
// chunks, so a snapshot of a big table takes hundreds of frames and a
// fault meets it mid-stream; a frame limit well above raft's largest
// append (1 MiB of entries, member.Core's MaxSizePerMsg, or one entry of
// up to 1 MiB) and far below the member's 64 MiB default, so the chunks,
// not the frame limit, bound a transfer's frames.
const (
	heldChunkSize  = 16 << 10
	heldFrameLimit = 2 << 20
	// minPeerFrameLimit is the smallest --peer-frame-limit the harness
	// accepts: below it a catch-up append may not fit a frame.
	minPeerFrameLimit = 1<<20 + 128<<10
)

// Transfer is how the members stream snapshots: their
// --snapshot-chunk-size, --peer-frame-limit (0: the member's default) and
// --snapshot-by-entries.
type Transfer struct {
	ChunkSize  int
	FrameLimit int
	ByEntries  bool
}

// Transfer returns the members' snapshot transfer settings: what the
// flags say, and with held locks small chunks by default and a snapshot
// every --snapshot-every entries whatever the table's size (a member
// otherwise waits until the log since its last snapshot is half the
// table, which a big table and a 30 s run never reach).
func (c *Config) Transfer() Transfer {
	t := Transfer{ChunkSize: c.SnapshotChunkSize, FrameLimit: c.PeerFrameLimit, ByEntries: c.Held > 0}
	if c.Held > 0 {
		if t.ChunkSize == 0 {
			t.ChunkSize = heldChunkSize
		}
		if t.FrameLimit == 0 {
			t.FrameLimit = heldFrameLimit
		}
	}
	return t
}

// Run runs the cluster, the workload and the nemesis, then heals, reads
// every key and collects the members' digests. history.jsonl and
// digests.json are written to cfg.Out. A *HarnessError means no verdict.
// When ctx ends (Ctrl-C) the run is cut short wherever it is (cut): the
// Result then holds what was recorded, and says where it stopped.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, &HarnessError{err}
	}
	if err := cfg.checkPower(); err != nil {
		return nil, &HarnessError{err}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r := &run{cfg: cfg, logs: filepath.Join(cfg.Out, "logs")}
	defer r.close()
	if cfg.Progress != nil {
		said := context.AfterFunc(ctx, func() {
			fmt.Fprintln(cfg.Progress, "chaos: interrupted: stopping the workload and the nemesis, then the cluster; what was recorded is checked and reported")
		})
		defer said()
	}
	phases := r.phases
	if cfg.target() != TargetRaftlock {
		phases = r.peerPhases
	}
	res, err := phases(ctx)
	if err != nil {
		var he *HarnessError
		if !errors.As(err, &he) {
			err = &HarnessError{err}
		}
		return nil, err
	}
	return res, nil
}

// run is one chaos run under way: the cluster, the history and what
// drives them.
type run struct {
	cfg  Config
	logs string // the members' logs and data
	keys []string
	hf   *os.File
	sup  *Supervisor
	rec  *history.Recorder
	wl   *Workload
	nem  *Nemesis
	held HeldFill
	// clients are the chaos-client processes (--client-procs).
	clients []*clientProc
	// peer is the service tried when it is not raftlock (--target).
	peer peerService
	// ran is how long the workload ran, once it stopped.
	ran time.Duration
	// power are the members' lazyfs mounts (the power families); nil:
	// their data is on the plain disk.
	power *powerDisks
	// unrecovered says how a peer target failed to take writes after
	// its last power cut was healed; "": it recovered.
	unrecovered string
}

func (r *run) close() {
	killClientProcs(r.clients)
	if r.peer != nil {
		r.peer.Close()
	}
	if r.sup != nil {
		r.sup.Close()
	}
	// The members are dead: their mounts can go, whatever ended the run
	// (its end, Ctrl-C, an error or a panic). A harness killed before
	// this leaves them to the next run's CleanStale.
	if err := r.power.unmount(); err != nil {
		r.cfg.Log.Error("lazyfs mounts left mounted", "err", err)
	}
	if r.hf != nil {
		r.hf.Close()
	}
}

// phases carries the run out: start the cluster and fill its table, run
// the workload under the nemesis, heal and read every key, restart every
// member from its disk, then collect what the checks need. Ctrl-C (ctx
// ending) cuts it short at any of them.
func (r *run) phases(ctx context.Context) (*Result, error) {
	if err := r.start(ctx); err != nil {
		where := "while the cluster started"
		if r.cfg.Held > 0 {
			where = "while the cluster started and its table filled"
		}
		return r.cutOr(ctx, where, err)
	}
	if err := r.record(); err != nil {
		return nil, err
	}
	// The snapshot counters die with each member process: poll them so a
	// member paused and then killed (it cannot answer the reading Kill
	// takes) loses at most one period of counts.
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go r.sup.PollMetrics(pollCtx, time.Second)
	if err := r.workload(ctx); err != nil {
		return r.cutOr(ctx, r.workloadWhere(), err)
	}
	r.progress("chaos: workload done: healing, reading every key, restarting every member from its disk")
	if err := r.heal(ctx); err != nil {
		return r.cutOr(ctx, "after the workload, while the cluster healed", err)
	}
	finalReads(ctx, r.wl, r.keys)
	if ctx.Err() != nil {
		return r.cut(ctx, "after the workload, during the final reads")
	}
	if err := r.restartAll(ctx); err != nil {
		return r.cutOr(ctx, "after the workload, during the final restarts", err)
	}
	digests := collectDigests(ctx, r.sup)
	if ctx.Err() != nil {
		return r.cut(ctx, "after the workload, while the members' digests were collected")
	}
	stopPoll()
	bg := context.WithoutCancel(ctx)
	r.sup.ReadAllMetrics(bg)
	return r.collect(bg, digests)
}

// workloadWhere says, for a run cut short during the workload, how long
// it had run.
func (r *run) workloadWhere() string {
	return fmt.Sprintf("during the workload, after %.1fs of %v", r.ran.Seconds(), r.cfg.Time)
}

// progress prints a progress line, if progress lines are wanted.
func (r *run) progress(line string) {
	if r.cfg.Progress != nil {
		fmt.Fprintln(r.cfg.Progress, line)
	}
}

// cutOr is err's end of the run, unless Ctrl-C interrupted it (ctx
// ended), whatever err then says: the run is then cut short where it
// was.
func (r *run) cutOr(ctx context.Context, where string, err error) (*Result, error) {
	if ctx.Err() == nil {
		return nil, err
	}
	return r.cut(ctx, where)
}

// cut ends a run Ctrl-C interrupted (where says when) with what it
// recorded. The workload and the nemesis have stopped with ctx (the
// nemesis healed the fault it had made, and operations cut short were
// recorded as info, or stay open, which the checker takes as info); the
// faults left are ended and recorded, every member is stopped, and the
// result is gathered as collect gathers it, without the final reads,
// restarts and digests of a run that ends: convergence is not checked,
// and the audit reads the members' journals as they stopped, a log that
// is never final. A run cut before its workload began still leaves a
// history, its header alone.
func (r *run) cut(ctx context.Context, where string) (*Result, error) {
	ctx = context.WithoutCancel(ctx)
	if err := r.openHistory(); err != nil {
		return nil, err
	}
	if r.peer != nil {
		return r.cutPeer(where)
	}
	if r.sup == nil {
		return &Result{Events: r.rec.Events(), Interrupted: where}, nil
	}
	r.stopCluster(ctx)
	if r.nem == nil {
		// Cut while the cluster started: nothing ran, nothing to report
		// but the crashes of members that could not start.
		if err := r.rec.Err(); err != nil {
			return nil, fmt.Errorf("write the history: %w", err)
		}
		return &Result{Events: r.rec.Events(), Stats: r.sup.Stats(), Crashes: r.sup.Crashes(), Held: r.held, Interrupted: where}, nil
	}
	res, err := r.collect(ctx, []checker.NodeDigest{})
	if err != nil {
		return nil, err
	}
	res.Interrupted = where
	return res, nil
}

// stopCluster ends the faults left and stops every member, for a run cut
// short: once the nemesis has run, the paused resumed, the links healed
// and the clocks set true, recorded as heal records them, and the
// snapshot counters read; then every member killed, none restarted and
// nothing waited for.
func (r *run) stopCluster(ctx context.Context) {
	if r.nem != nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resumed, clocks, err := r.sup.EndFaults(fctx)
		cancel()
		if err != nil {
			r.cfg.Log.Warn("a clock was not set true before the members stopped", "err", err)
		}
		if len(resumed) > 0 {
			fault.Resume{Nodes: resumed}.Record(r.rec)
		}
		for _, id := range clocks {
			fault.TrueClock(id).Record(r.rec)
		}
		fault.Heal{}.Record(r.rec)
		r.sup.ReadAllMetrics(ctx)
	}
	for _, id := range r.sup.IDs() {
		r.sup.kill(id)
	}
}

// start starts the cluster and fills its table with the held locks.
func (r *run) start(ctx context.Context) error {
	cfg := r.cfg
	if err := os.MkdirAll(r.logs, 0o755); err != nil {
		return err
	}
	hf, err := os.Create(filepath.Join(cfg.Out, "history.jsonl"))
	if err != nil {
		return err
	}
	r.hf = hf
	var extra []string
	if cfg.Bug != "" {
		extra = []string{"--unsafe-bug", cfg.Bug}
	}
	r.sup, err = NewSupervisor(ClusterSpec{Bin: cfg.Bin, Dir: r.logs, Nodes: cfg.Nodes, ExtraArgs: extra, Seed: cfg.Seed,
		SnapshotEvery: cfg.SnapshotEvery, SnapshotKeep: cfg.SnapshotKeep, Transfer: cfg.Transfer(),
		Membership: slices.Contains(cfg.Nemeses, fault.FamilyMembership) || slices.Contains(cfg.Nemeses, fault.FamilyCorrupt), API: cfg.usesAPI()})
	if err != nil {
		return err
	}
	if cfg.usesPower() {
		if r.power, err = mountPower(ctx, r.sup.DataDir, r.sup.IDs(), cfg.Seed, cfg.Log); err != nil {
			return err
		}
	}
	if err := r.sup.Start(); err != nil {
		return err
	}
	readyCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err = r.sup.WaitReady(readyCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("cluster never came up: %w (see %s)", err, r.logs)
	}
	r.held, err = fillHeld(ctx, r.sup.ClientAddrs(), cfg.Held, cfg.KeySize, cfg.Progress)
	if err != nil {
		return err
	}
	if cfg.Held > 0 && cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "chaos: held %d locks of %d-byte keys in %.1fs\n", r.held.Locks, r.held.KeySize, r.held.Seconds)
	}
	return nil
}

// header is the history's header line of a run on keys: the settings
// both harnesses write, the members' snapshot transfer, and only where
// the run differs from a default one, its resource mode (settingsNotes).
func (c *Config) header(keys []string) map[string]any {
	tr := c.Transfer()
	h := workload.Header{Seed: c.Seed, Nodes: c.Nodes, Nemeses: c.Nemeses, Clients: c.Clients, Keys: keys,
		LeaseMin: c.LeaseMin, LeaseMax: c.LeaseMax, Time: c.Time, Bug: c.Bug,
		SnapshotEvery: c.SnapshotEvery, SnapshotKeep: c.SnapshotKeep, Held: c.Held, KeySize: c.KeySize}
	extra := map[string]any{"snapshot_by_entries": tr.ByEntries, "snapshot_chunk_size": tr.ChunkSize, "peer_frame_limit": tr.FrameLimit}
	notes, _ := c.settingsNotes()
	maps.Copy(extra, notes)
	return h.Map(extra)
}

// openHistory starts the history in the file start created, with its
// header, once.
func (r *run) openHistory() error {
	if r.rec != nil {
		return nil
	}
	if r.hf == nil {
		hf, err := os.Create(filepath.Join(r.cfg.Out, "history.jsonl"))
		if err != nil {
			return err
		}
		r.hf = hf
	}
	r.keys = workload.Keys(r.cfg.Keys)
	var err error
	r.rec, err = history.NewRecorder(r.hf, r.cfg.header(r.keys))
	return err
}

// record opens the history with its header and sets up the workload and
// the nemesis that write to it.
func (r *run) record() error {
	cfg := r.cfg
	if err := r.openHistory(); err != nil {
		return err
	}
	r.wl = &Workload{Clients: cfg.Clients, Keys: r.keys, LeaseMin: cfg.LeaseMin, LeaseMax: cfg.LeaseMax,
		Endpoints: r.sup.ClientAddrs(), Spare: r.sup.AllClientAddrs()[cfg.Nodes:], Seed: cfg.Seed, Rec: r.rec, Store: workload.NewResource(r.rec, cfg.resource()),
		Dial: cfg.dialer(r.sup)}
	families, _ := cfg.nemeses()
	if len(families) == len(cfg.Nemeses) {
		families = cfg.Nemeses // as it always was: nil for none
	}
	r.nem = &Nemesis{Sup: r.sup, Rec: r.rec, Families: families, Interval: cfg.FaultInterval, Duration: cfg.FaultDuration,
		Seed: cfg.Seed, Log: cfg.Log, BigSnapshots: cfg.Held > 0, ClientPauseMin: cfg.LeaseMax + clientPauseMargin, Power: r.power}
	return nil
}

// workload runs the clients for cfg.Time, the nemesis and the progress
// lines beside them.
func (r *run) workload(ctx context.Context) error {
	if r.cfg.ClientProcs > 0 {
		procs, err := startClientProcs(r.cfg, r.wl, r.rec, r.logs)
		if err != nil {
			return err
		}
		r.clients, r.nem.Clients = procs, procs
	}
	runCtx, stop := context.WithTimeout(ctx, r.cfg.Time)
	defer stop()
	var wg sync.WaitGroup
	if len(r.nem.Families) > 0 {
		wg.Go(func() { r.nem.Run(runCtx) })
	}
	if len(r.clients) > 0 {
		wg.Go(func() {
			<-runCtx.Done()
			stopClientProcs(r.clients)
		})
	}
	wg.Go(func() { printProgress(runCtx, r.cfg, r.rec, r.wl, r.nem) })
	began := time.Now()
	err := r.wl.Run(runCtx)
	r.ran = time.Since(began)
	wg.Wait()
	if err != nil {
		return err
	}
	return ctx.Err()
}

// heal ends every fault, records what that undid, and waits for the
// cluster to be ready again, or for ctx to end (Ctrl-C): the faults are
// ended whatever ctx says.
func (r *run) heal(ctx context.Context) error {
	resumed, started, clocks, err := r.sup.HealAll(context.WithoutCancel(ctx))
	if len(resumed) > 0 {
		fault.Resume{Nodes: resumed}.Record(r.rec)
	}
	if len(started) > 0 {
		fault.Start{Nodes: started}.Record(r.rec)
	}
	for _, id := range clocks {
		fault.TrueClock(id).Record(r.rec)
	}
	fault.Heal{}.Record(r.rec)
	if err != nil {
		return err
	}
	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = r.sup.WaitReady(readyCtx)
	cancel()
	if err != nil {
		crashes := r.sup.Crashes()
		if len(crashes) == 0 || ctx.Err() != nil {
			return fmt.Errorf("cluster did not recover after healing: %w", err)
		}
		// Members that died on their own are raftlock's failure, not the
		// harness's: carry on, so the run reports them with its history.
		r.cfg.Log.Error("cluster did not recover after healing", "err", err, "crashed", crashNote(crashes))
	}
	return nil
}

// restartAll kills and restarts each member in turn, the rest of the
// cluster up: every member must come back from what it has on disk now
// that the load stopped, as after a user's kill -9 (a member whose stored
// state it cannot load exits, and member-crashes reports it). The members
// are the ones now, which after membership changes are not 1..N.
func (r *run) restartAll(ctx context.Context) error {
	for _, id := range r.sup.IDs() {
		if err := ctx.Err(); err != nil {
			return err
		}
		fault.Kill{Nodes: []int{id}}.Record(r.rec)
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		err := r.sup.RestartNode(rctx, id)
		rcancel()
		if ctx.Err() != nil {
			// Cut short: it was started again unless it is down.
			if r.sup.Running(id) {
				fault.Start{Nodes: []int{id}}.Record(r.rec)
			}
			return ctx.Err()
		}
		if err != nil && len(r.sup.Crashes()) == 0 {
			return fmt.Errorf("final restart of node %d: %w", id, err)
		}
		fault.Start{Nodes: []int{id}}.Record(r.rec)
	}
	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.sup.WaitReady(readyCtx); err != nil && (len(r.sup.Crashes()) == 0 || ctx.Err() != nil) {
		return fmt.Errorf("cluster did not recover after the final restarts: %w", err)
	}
	return nil
}

// crashNote names the members that died on their own, for the log.
func crashNote(crashes []Crash) string {
	if len(crashes) == 0 {
		return ""
	}
	var parts []string
	for _, c := range crashes {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, "; ")
}

// finalReads reads every key once, after healing, from a fresh process,
// until ctx ends.
func finalReads(ctx context.Context, wl *Workload, keys []string) {
	wk := &worker{w: wl, proc: wl.newProcess()}
	var err error
	if wk.reader, err = wl.dial(0, append(slices.Clone(wl.Endpoints), wl.Spare...)); err != nil {
		return
	}
	defer wk.reader.Close()
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		wk.get(ctx, k)
	}
}

// collectDigests waits (up to 15 s, or until ctx ends) for every member
// to reach the same applied index, then takes each member's digest.
func collectDigests(ctx context.Context, sup *Supervisor) []checker.NodeDigest {
	deadline := time.Now().Add(15 * time.Second)
	var st map[int]wire.Status
	for {
		st = sup.Status(ctx)
		same := len(st) == len(sup.IDs())
		ids := sup.IDs()
		for _, s := range st {
			same = same && s.Applied == st[ids[0]].Applied
		}
		if same || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var out []checker.NodeDigest
	for _, id := range sup.IDs() {
		if s, ok := st[id]; ok {
			out = append(out, checker.NodeDigest{Node: id, Applied: s.Applied, Digest: s.Digest})
		}
	}
	return out
}

// printProgress prints a progress line every 3 s until ctx ends.
func printProgress(ctx context.Context, cfg Config, rec *history.Recorder, wl *Workload, nem *Nemesis) {
	if cfg.Progress == nil {
		return
	}
	stop := progress.Every(3*time.Second, func() {
		current := nem.Current()
		if current == "" {
			current = "none"
		}
		fmt.Fprintf(cfg.Progress, "chaos: %5.1fs/%v ok=%d fail=%d info=%d fault=%s\n",
			float64(rec.Now())/1e9, cfg.Time, wl.Counts.OK.Load(), wl.Counts.Fail.Load(), wl.Counts.Info.Load(), current)
	})
	<-ctx.Done()
	stop()
}

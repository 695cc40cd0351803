package chaos

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/lazyfs"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/reportdir"
)

// Synopsis is raftlock chaos's usage line.
func Synopsis() string {
	return "chaos [--nodes 3] [--seed N] [--duration 30s] [--nemesis " + fault.Join(Families) + "] (opt-in: " + fault.Join(optIn()) +
		") [--snapshot-every 100] [--held N [--key-size 250]] [--out DIR] [--unsafe-bug NAME]\n" +
		"       raftlock chaos [--clients 8] [--keys 3] [--protocols binary,grpc,http] ...\n" +
		"       raftlock chaos --target etcd|redis|nats [--redis-fsync everysec|always] [--nats-sync default|always] [--nats-server PATH] [--seed N] [--duration 30s] [--nemesis ...] [--out DIR]"
}

// Flags are raftlock chaos's flags: a Config, its seed and its nemeses.
type Flags struct {
	Config  Config
	Seed    cliflag.Seed
	nemeses string
}

// RegisterFlags defines raftlock chaos's flags on fs, their defaults
// Defaults: the run length is --duration, as in every command (--time
// stays as an alias for scripts written before), and the fault schedule's
// knobs are --fault-*.
func (f *Flags) RegisterFlags(fs *flag.FlagSet) {
	d, cfg := Defaults(), &f.Config
	fs.IntVar(&cfg.Nodes, "nodes", d.Nodes, "cluster size: 3 or 5")
	fs.Var(&f.Seed, "seed", "`N`, the seed of the fault schedule and the workload; random draws one and prints it, so the run can be replayed")
	fs.DurationVar(&cfg.Time, "duration", d.Time, "how long the workload runs")
	fs.DurationVar(&cfg.Time, "time", d.Time, "alias of --duration")
	fs.IntVar(&cfg.Clients, "clients", d.Clients, "concurrent clients")
	fs.IntVar(&cfg.Keys, "keys", d.Keys, "keys they contend on")
	fs.DurationVar(&cfg.FaultInterval, "fault-interval", d.FaultInterval, "mean quiet time between faults")
	fs.DurationVar(&cfg.FaultDuration, "fault-duration", d.FaultDuration, "mean fault length")
	fs.DurationVar(&cfg.LeaseMin, "lease-min", d.LeaseMin, "shortest lease a client asks for")
	fs.DurationVar(&cfg.LeaseMax, "lease-max", d.LeaseMax, "longest lease a client asks for")
	fs.Uint64Var(&cfg.SnapshotEvery, "snapshot-every", d.SnapshotEvery, "every member's --snapshot-every: applied entries between snapshots")
	fs.Uint64Var(&cfg.SnapshotKeep, "snapshot-keep", d.SnapshotKeep, "every member's --snapshot-keep: entries kept behind a snapshot (small, so an isolated follower soon needs one)")
	fs.IntVar(&cfg.Held, "held", d.Held, "`N` locks taken before the workload (1 h leases, keys it never touches), so snapshots are big; members then snapshot by entries, in small chunks")
	fs.IntVar(&cfg.KeySize, "key-size", d.KeySize, "`bytes` of each held key (1..256)")
	fs.IntVar(&cfg.SnapshotChunkSize, "snapshot-chunk-size", d.SnapshotChunkSize, "every member's --snapshot-chunk-size in `bytes` (0: 16384 with --held, else the member's default)")
	fs.IntVar(&cfg.PeerFrameLimit, "peer-frame-limit", d.PeerFrameLimit, "every member's --peer-frame-limit in `bytes` (0: 2 MiB with --held, else the member's default; at least 1.125 MiB)")
	fs.StringVar(&cfg.Bug, "unsafe-bug", "", "plant a known bug in every node (proves the checker catches it)")
	fs.StringVar(&cfg.Out, "out", "", "report directory (default chaos-out/seed-N); replaced if it holds a previous report, refused if it holds anything else")
	fs.StringVar(&cfg.Bin, "bin", "", "raftlock executable for the nodes (default: this one)")
	fs.StringVar((*string)(&cfg.Resource), "resource", string(workload.Fenced), "what the locks guard: fenced (refuses a token lower than the highest it accepted) or unfenced (a read-sleep-write register that accepts every write: shows what fencing buys)")
	fs.IntVar(&cfg.ClientProcs, "client-procs", d.ClientProcs, "`N` workload clients run as processes beside --clients, which the opt-in family "+fault.Join(ClientFamilies)+" stops (SIGSTOP) past their lease")
	registerProtocols(fs, &cfg.Protocols)
	fs.BoolVar(&cfg.PinMembers, "pin-members", false, "keep each --protocols http or grpc client to one member (client i to the i-th) and never ask to be redirected, so followers relay its calls to the leader, as for a stock client")
	fs.StringVar((*string)(&cfg.Target), "target", string(TargetRaftlock), "the lock service tried: "+joinTargets()+" (etcd, redis and nats are started from the etcd, redis-server and nats-server on PATH, make peers installs them; families a target cannot carry out are named in the header and summary.md)")
	fs.StringVar((*string)(&cfg.RedisFsync), "redis-fsync", "", "with --target redis, its appendfsync: everysec (the default, Redis's own: an fsync every second, writes answered before) or always (an fsync before each write is answered)")
	fs.StringVar((*string)(&cfg.NatsSync), "nats-sync", "", "with --target nats, JetStream's fsync: default (the server's: every two minutes, writes acknowledged before) or always (sync_interval: always; needs a server that has it: make peers builds one in bin/peers)")
	fs.BoolVar(&cfg.PowerStrict, "power-strict", false, "with power or power-all on --target etcd|redis|nats: do not fsync each server's data directories once after it first answers (then a cut also drops the directory entries the server made at its start and never synced)")
	fs.StringVar(&cfg.NatsServer, "nats-server", "", "with --target nats, the nats-server `PATH` (default: the one on PATH, Debian's 2.9.10, which has no sync_interval; make peers builds v2.12.1 in bin/peers/nats-server)")
	fs.StringVar(&f.nemeses, "nemesis", fault.Join(Families), "fault families (comma-separated; 'none' for none; opt-in, never in the default: "+fault.Join(optIn())+")")
}

// registerProtocols defines --protocols on fs, into *protocols: the
// protocols the workload's clients speak, client i the i-th modulo their
// number. Unset, every client speaks the binary protocol, as always.
func registerProtocols(fs *flag.FlagSet, protocols *[]string) {
	fs.Func("protocols", "`LIST` of protocols the workload's clients speak, client i the i-th modulo their number: some of "+
		strings.Join(apiclient.Protocols(), ",")+" (default "+apiclient.ProtocolBinary+"; the others reach each member's --api port)", func(s string) error {
		if *protocols = cliflag.SplitList(s); len(*protocols) == 0 {
			return fmt.Errorf("want some of %s", strings.Join(apiclient.Protocols(), ","))
		}
		return nil
	})
}

// Prepare makes the parsed flags a run's Config: the seed drawn if none
// was given, every setting checked before the disk is touched (a mistyped
// re-run must not cost the previous report), then the report directory
// (default chaos-out/seed-N) readied and the executable (default: this
// one) found.
func (f *Flags) Prepare() (Config, error) {
	cfg := f.Config
	cfg.Seed = f.Seed.Value()
	if f.nemeses != "none" && f.nemeses != "" {
		cfg.Nemeses = fault.Split(f.nemeses)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	if err := cfg.checkPower(); err != nil {
		return cfg, err
	}
	if cfg.Out == "" {
		cfg.Out = filepath.Join("chaos-out", fmt.Sprintf("seed-%d", cfg.Seed))
	}
	if cfg.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return cfg, err
		}
		cfg.Bin = exe
	}
	// A harness killed during a power run leaves its mounts, dead, and
	// maybe under this very report directory: unmount them before it is
	// replaced. Only a run with power families must succeed at it; with
	// no state directory (no power run was ever made here) it does
	// nothing.
	if _, err := lazyfs.CleanStale(""); err != nil && cfg.usesPower() {
		return cfg, fmt.Errorf("clean the lazyfs mounts a dead harness left: %w", err)
	}
	return cfg, reportdir.Prepare(cfg.Out)
}

// RunAndCheck carries a prepared run out as raftlock chaos does, its
// progress and warnings to progress: it runs, writes what the audit
// settled (resolved.json, for a reader: check --log redoes it), checks the
// result and writes the reports into cfg.Out. written are the files there.
func RunAndCheck(ctx context.Context, cfg Config, progress io.Writer) (v *checker.Verdict, written []string, err error) {
	cfg.Progress = progress
	cfg.Log = slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fmt.Fprintf(progress, "chaos: seed %d, %d nodes, %v, nemeses %v, bug %q -> %s\n", cfg.Seed, cfg.Nodes, cfg.Time, cfg.Nemeses, cfg.Bug, cfg.Out)
	if _, lines := cfg.settingsNotes(); len(lines) > 0 {
		fmt.Fprintf(progress, "chaos: %s\n", strings.Join(lines, "\nchaos: "))
	}
	if cfg.Held > 0 {
		t := cfg.Transfer()
		fmt.Fprintf(progress, "chaos: %d held locks of %d-byte keys; members snapshot every %d entries, in chunks of %d bytes, frame limit %d\n",
			cfg.Held, cfg.KeySize, cfg.SnapshotEvery, t.ChunkSize, t.FrameLimit)
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if res.Log != nil {
		if err := writeJSON(cfg.Out, "resolved.json", checker.Resolve(res.Events, *res.Log), true); err != nil {
			cfg.Log.Warn("resolved.json not written", "err", err)
		}
	}
	v = Check(res, 0)
	if _, err := v.WriteReports(cfg.Out); err != nil {
		return nil, nil, err
	}
	if _, lines := cfg.settingsNotes(); len(lines) > 0 {
		if err := noteSettings(filepath.Join(cfg.Out, "summary.md"), lines); err != nil {
			return nil, nil, err
		}
	}
	written, err = reportdir.Files(cfg.Out)
	return v, written, err
}

// noteSettings adds lines, the run's settings that differ from a default
// run, to the summary.md the checker wrote, after its title: the
// checker knows the history, not the run that made it.
func noteSettings(summary string, lines []string) error {
	b, err := os.ReadFile(summary)
	if err != nil {
		return fmt.Errorf("note the run's settings: %w", err)
	}
	title, rest, _ := strings.Cut(string(b), "\n\n")
	text := title + "\n\n" + strings.Join(lines, "\n\n") + "\n\n" + rest
	if err := os.WriteFile(summary, []byte(text), 0o644); err != nil {
		return fmt.Errorf("note the run's settings: %w", err)
	}
	return nil
}

// ClientFlags are raftlock chaos-client's flags: what the harness tells
// the client process it starts.
type ClientFlags struct {
	Endpoints string
	Spare     string
	Keys      string
	Seed      uint64
	Index     int
	LeaseMin  time.Duration
	LeaseMax  time.Duration
	Target    string
}

// ClientSynopsis is raftlock chaos-client's usage line.
const ClientSynopsis = "chaos-client --endpoints A,B,C --keys k1,k2 --seed N --index I [--spare D,E] [--lease-min 200ms] [--lease-max 1s]" +
	" (started by raftlock chaos --client-procs; speaks JSON lines on stdin and stdout)"

// RegisterFlags defines raftlock chaos-client's flags on fs.
func (f *ClientFlags) RegisterFlags(fs *flag.FlagSet) {
	d := Defaults()
	fs.StringVar(&f.Endpoints, "endpoints", "", "the members' client addresses (comma-separated)")
	fs.StringVar(&f.Spare, "spare", "", "client addresses of members the run may add (comma-separated)")
	fs.StringVar(&f.Keys, "keys", "", "the keys the workload contends on (comma-separated)")
	fs.Uint64Var(&f.Seed, "seed", 0, "the run's seed")
	fs.IntVar(&f.Index, "index", 0, "which of the workload's random streams this client draws from")
	fs.DurationVar(&f.LeaseMin, "lease-min", d.LeaseMin, "shortest lease the client asks for")
	fs.DurationVar(&f.LeaseMax, "lease-max", d.LeaseMax, "longest lease the client asks for")
	fs.StringVar(&f.Target, "target", string(TargetRaftlock), "the lock service the endpoints are: "+joinTargets())
}

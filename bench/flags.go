package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/node"
)

// Synopsis is raftlock bench's usage text.
const Synopsis = "bench [--clients 64] [--workload uncontended] [--compare etcd,redis] [--protocol binary] [--duration 10s] [--repeat 1] [--tls] [--out DIR] [--json]\n" +
	"       raftlock bench --held 0,100000,1000000 [--key-size 250] [--fill-clients 256] [--catch-up=false] ...\n" +
	"       raftlock bench --endpoints HOST:PORT,... [--cert FILE --key FILE --ca FILE] ...\n\n" +
	"With --tls the cluster it starts runs mutual TLS 1.3 on every port: a fresh CA, member\n" +
	"certificates and a client certificate are written under the data directory, and the\n" +
	"bench's clients connect with that client certificate. Against a running secured cluster\n" +
	"(--endpoints), give the clients' --cert, --key and --ca instead. Every run releases what\n" +
	"its clients still hold when it ends or is interrupted (Ctrl-C), so a running cluster keeps\n" +
	"none of the bench's locks.\n\n" +
	"With --held every point runs against a table of that many held locks (1 h leases), each\n" +
	"size in turn on one cluster, filled on from the previous size; against --endpoints the\n" +
	"bench releases every lock it took when it is done, Ctrl-C included."

// Command is a raftlock bench command line: RegisterFlags defines its
// flags, Check turns what they were set to into a plan, and Run measures
// it and writes the results.
type Command struct {
	nodes          int
	endpoints      string
	useTLS         bool
	tlsFiles       tlsconfig.Files
	clientTLS      *tls.Config
	workloads      []string
	counts         []int
	rate           float64
	duration       time.Duration
	repeat         int
	warmup         time.Duration
	lease          time.Duration
	hotKeys        int
	peers          []string
	noBatch        bool
	noHandoff      bool
	noOverlap      bool
	maxInflight    int
	maxUncommitted int
	out            string
	dir            string
	bin            string
	asJSON         bool
	// --held: the table sizes, ascending; the key size of held and
	// workload keys; the fill's clients; whether to run the catch-up and
	// join experiments; the members' --snapshot-every.
	held          []int
	keySize       int
	fillClients   int
	catchUp       bool
	snapshotEvery uint64
	memberProcs   int
	// protocol is what raftlock's measured clients speak (--protocol).
	protocol string
	// viaFollower sends the API's calls to a follower, which relays
	// them (--via-follower).
	viaFollower bool
	// The flags' text, which Check parses.
	workloadList, clientList, compareList, heldList string
	catchUpFlag                                     cliflag.OptBool
}

// RegisterFlags defines raftlock bench's flags on fs.
func (c *Command) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.nodes, "nodes", 3, "members of every cluster the bench starts, raftlock's and etcd's (1..9; usually 3 or 5)")
	fs.StringVar(&c.endpoints, "endpoints", "", "bench a running raftlock cluster instead of starting one")
	fs.BoolVar(&c.useTLS, "tls", false, "start the cluster with mutual TLS 1.3 (fresh CA and certificates in the data directory); with --endpoints use --cert, --key and --ca")
	c.tlsFiles.RegisterClientFlags(fs)
	fs.StringVar(&c.workloadList, "workload", "uncontended", "workloads: uncontended, contended, mixed (comma-separated)")
	fs.StringVar(&c.clientList, "clients", "64", "closed-loop client counts (comma-separated)")
	fs.Float64Var(&c.rate, "rate", 0, "open loop: ops per second (latency from the intended start); 0: closed loop")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured time per run")
	fs.IntVar(&c.repeat, "repeat", 1, "run each point `N` times and report the median, with the lowest and highest, so a noisy machine shows its spread")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured time before each run")
	fs.DurationVar(&c.lease, "lease", 10*time.Second, "lease of every acquire (the held locks' is 1h)")
	fs.IntVar(&c.hotKeys, "hot-keys", 1, "contended workload: number of hot keys")
	fs.StringVar(&c.protocol, "protocol", apiclient.ProtocolBinary, "what raftlock's clients speak: "+strings.Join(apiclient.Protocols(), ", ")+
		" (binary on each member's client port, the others on its --api port, which the bench then has every member serve)")
	fs.BoolVar(&c.viaFollower, "via-follower", false, "with --protocol grpc or http: send every call to one follower, which relays it to the leader (what a client that does not follow redirects gets), to measure forwarding's cost")
	fs.StringVar(&c.compareList, "compare", "", "peers to run side by side: etcd (= etcd-mutex,etcd-txn), etcd-mutex, etcd-txn, redis")
	fs.BoolVar(&c.noBatch, "no-batch", false, "ablation: one command per log entry")
	fs.BoolVar(&c.noOverlap, "no-write-overlap", false, "ablation: members take no call or message while a log write is being synced")
	fs.BoolVar(&c.noHandoff, "no-handoff", false, "ablation: grant a freed key's next waiter only once the release applied, not in its log entry")
	fs.IntVar(&c.maxInflight, "max-inflight", 0, "ablation: raft appends in flight per follower (1: no pipelining)")
	fs.IntVar(&c.maxUncommitted, "max-uncommitted", 0, "ablation: every member's --max-uncommitted, entries a leader keeps uncommitted (-1: no limit; 0: the node's default)")
	fs.StringVar(&c.heldList, "held", "", "table sizes: before measuring, hold `N[,N...]` locks (1h leases), each size in turn; every point runs at each (raftlock only)")
	fs.IntVar(&c.keySize, "key-size", 0, fmt.Sprintf("`bytes` of every key, held and workload (%d..%d; default: the workloads' names, about 25 bytes)", MinKeySize, MaxKeySize))
	fs.IntVar(&c.fillClients, "fill-clients", 256, "concurrent acquires that fill the table of --held locks")
	c.catchUpFlag.Def = "on with a non-zero --held"
	fs.Var(&c.catchUpFlag, "catch-up", "with --held on the bench's own cluster: measure the idle leader's CPU, a killed follower's catch-up by snapshot and a new member's join at each size")
	fs.IntVar(&c.memberProcs, "member-procs", 0, "GOMAXPROCS of every raftlock member the bench starts (default: the machine's cores shared among them, at least 1)")
	fs.Uint64Var(&c.snapshotEvery, "snapshot-every", 0, "every member's --snapshot-every (and a tenth of it as --snapshot-keep); default 1000 with --held, else the node's")
	fs.StringVar(&c.out, "out", "", "write bench.json, bench.md and plots here (and scale.md, scale.png with several --held sizes)")
	fs.StringVar(&c.dir, "data", "", "data directory for the clusters it starts (default: a new temporary directory, removed after)")
	fs.StringVar(&c.dir, "dir", "", "alias of --data")
	fs.StringVar(&c.bin, "bin", "", "raftlock executable for the nodes (default: this one)")
	fs.BoolVar(&c.asJSON, "json", false, "print the results as JSON")
}

// Check turns the flags' text into the command's values once they are
// parsed, refusing what cannot run (usage errors) before anything starts.
func (c *Command) Check() error {
	var err error
	if c.counts, err = cliflag.Counts(c.clientList, "--clients", 1); err != nil {
		return err
	}
	if c.held, err = cliflag.Counts(c.heldList, "--held", 0); err != nil {
		return err
	}
	c.held = slices.Compact(slices.Sorted(slices.Values(c.held)))
	c.catchUp = c.catchUpFlag.Or(len(c.held) > 0 && c.held[len(c.held)-1] > 0)
	c.workloads = cliflag.SplitList(c.workloadList)
	if c.peers, err = peersToCompare(c.compareList); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if c.viaFollower && !usesAPI(c.protocol) {
		return cliflag.Usagef("--via-follower needs --protocol grpc or http: binary clients follow redirects themselves")
	}
	if err := checkProtocol(c.protocol, c.endpoints != ""); err != nil {
		return err
	}
	// After validate: certificates without --endpoints are a usage error
	// whether or not their files can be read.
	c.clientTLS, err = c.tlsFiles.ClientConfig()
	return err
}

func peersToCompare(s string) ([]string, error) {
	var peers []string
	for _, p := range cliflag.SplitList(s) {
		switch p {
		case "etcd":
			peers = append(peers, "etcd-mutex", "etcd-txn")
		case "etcd-mutex", "etcd-txn", "redis":
			peers = append(peers, p)
		default:
			return nil, cliflag.Usagef("unknown peer %q", p)
		}
	}
	return peers, nil
}

// validate refuses what cannot run, before anything starts.
func (c *Command) validate() error {
	for _, w := range c.workloads {
		if w != Uncontended && w != Contended && w != Mixed {
			return cliflag.Usagef("unknown workload %q", w)
		}
	}
	switch {
	case len(c.counts) == 0 || len(c.workloads) == 0 || c.duration <= 0:
		return cliflag.Usagef("need clients, a workload and a positive --duration")
	case c.repeat < 1:
		return cliflag.Usagef("--repeat must be at least 1, got %d", c.repeat)
	case c.useTLS && c.endpoints != "":
		return cliflag.Usagef("--tls starts a secured cluster; against --endpoints give the client's --cert, --key and --ca")
	case c.tlsFiles.Set() && c.endpoints == "":
		return cliflag.Usagef("--cert, --key and --ca are for a running cluster (--endpoints); use --tls for a secured cluster of the bench's own")
	case c.keySize != 0 && (c.keySize < MinKeySize || c.keySize > MaxKeySize):
		return cliflag.Usagef("--key-size must be %d..%d, got %d", MinKeySize, MaxKeySize, c.keySize)
	case len(c.held) > 0 && len(c.peers) > 0:
		return cliflag.Usagef("--held measures raftlock only: run --compare without it")
	case c.nodes < 1 || c.nodes > 9:
		return cliflag.Usagef("--nodes must be 1..9, got %d", c.nodes)
	case !(c.rate >= 0) || math.IsInf(c.rate, 1):
		return cliflag.Usagef("--rate must be a number of ops per second, or 0 for closed loop; got %v", c.rate)
	case c.fillClients < 1:
		return cliflag.Usagef("--fill-clients must be at least 1, got %d", c.fillClients)
	}
	if c.out != "" {
		// Refused now, not once the run is measured and its results
		// would be lost.
		if fi, err := os.Stat(c.out); err == nil && !fi.IsDir() {
			return cliflag.Usagef("--out %s is a file, not a directory", c.out)
		}
	}
	if len(c.held) > 0 && c.snapshotEvery == 0 && c.endpoints == "" {
		// Small enough that a follower down for a few seconds of load
		// needs a snapshot to catch up.
		c.snapshotEvery = 1000
	}
	return nil
}

// Run measures the checked command (command is its text, kept in the
// report) and writes the results where they were asked for. stop, called
// when the bench must release locks after an interruption, stops catching
// signals, so that a second Ctrl-C ends it at once. An interrupted run
// writes what it measured and ends with ExitInterrupted.
func (c *Command) Run(ctx context.Context, stop func(), command string, stdout, stderr io.Writer) error {
	var err error
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "raftlock-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(c.dir)
	}
	if c.bin == "" {
		if c.bin, err = os.Executable(); err != nil {
			return err
		}
	}
	rep := &Report{Command: command,
		Machine: Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()},
		TLS:     c.useTLS || c.clientTLS != nil}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := c.Plan().Run(ctx, rep, stderr, log, stop); err != nil {
		return err
	}
	return c.report(rep, stdout)
}

// Plan is what the flags ask the bench to measure.
func (c *Command) Plan() Plan {
	return Plan{Raftlock: c.raftlockConfig(), Endpoints: cliflag.SplitList(c.endpoints), ClientTLS: c.clientTLS, Compare: c.peers,
		Spec:      Spec{Rate: c.rate, Duration: c.duration, Warmup: c.warmup, HotKeys: c.hotKeys, KeySize: c.keySize},
		Workloads: c.workloads, Clients: c.counts, Repeat: c.repeat, Held: c.held, FillClients: c.fillClients, CatchUp: c.catchUp}
}

// report writes the results where they were asked for.
func (c *Command) report(rep *Report, stdout io.Writer) error {
	if c.out != "" {
		if err := rep.Write(c.out); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
	}
	if c.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.Table(stdout)
		if c.out != "" {
			files := "bench.json, bench.md, throughput.png, latency-cdf-*.png"
			if len(rep.Scale) > 1 {
				files += ", scale.md, scale.png"
			}
			fmt.Fprintf(stdout, "results in %s (%s)\n", c.out, files)
		}
	}
	if rep.Partial {
		return cliflag.WithCode(cliflag.ExitInterrupted, errors.New("interrupted: partial results"))
	}
	return nil
}

// raftlockConfig is the cluster the bench starts, named after the
// ablations it runs.
func (c *Command) raftlockConfig() RaftlockConfig {
	cfg := RaftlockConfig{Bin: c.bin, Dir: c.dir, Nodes: c.nodes, NoBatch: c.noBatch, NoHandoff: c.noHandoff, NoWriteOverlap: c.noOverlap,
		MaxInflight: c.maxInflight, MaxUncommitted: c.maxUncommitted, Lease: c.lease, TLS: c.useTLS,
		SnapshotEvery: c.snapshotEvery, SnapshotKeep: max(c.snapshotEvery/10, 1), MemberProcs: c.memberProcs, Protocol: c.protocol, ViaFollower: c.viaFollower}
	if c.snapshotEvery == 0 {
		cfg.SnapshotKeep = 0
	}
	cfg.Name = cfg.AblationName()
	if len(c.held) > 0 {
		// Room for the held locks beside every point's own keys.
		cfg.MaxKeys = max(node.DefaultMaxKeys, c.held[len(c.held)-1]+1<<16)
	}
	return cfg
}

package embed

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/clusterstatus"
	"github.com/raftlock/raftlock/node/peer"
	"github.com/raftlock/raftlock/node/server"
)

// Flags are raftlock node's flags: Config holds what they set directly,
// with the node's own defaults; the rest is turned into a Config by
// Peers and MemberConfig. raftlock cluster shares the tuning flags.
type Flags struct {
	Config    Config
	peers     string
	join      string // client endpoints of the cluster to join (Peers)
	logLevel  string
	logFormat string
	clusterID string
	// grpcReflection is --grpc-reflection (Config.NoGRPCReflection
	// inverted: on unless turned off).
	grpcReflection bool
}

// RegisterFlags defines raftlock node's flags on fs.
func (f *Flags) RegisterFlags(fs *flag.FlagSet) {
	c := &f.Config
	fs.Uint64Var(&c.Node.ID, "id", 0, "member id (required, > 0)")
	fs.StringVar(&f.peers, "peers", "", "every member's raft address: 1=127.0.0.1:7001,2=...")
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8001", "client API address to listen on")
	fs.StringVar(&c.Advertise, "advertise-client", "", "client address other members give out in redirects (default: --listen; set it when --listen is 0.0.0.0)")
	fs.StringVar(&c.Node.PeerListen, "peer-listen", "", "raft address to listen on (default: this member's address in --peers, which is what the others dial)")
	fs.StringVar(&c.HTTP, "http", "", "HTTP address for /metrics, /status, /healthz (empty: off)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", "", "plain HTTP address serving only /metrics and /healthz, without TLS or a client certificate even when the member has certificates, for probes and scrapers (empty: off)")
	fs.StringVar(&c.API, "api", "", "API address, HTTP/JSON (POST /v1/acquire, ...; docs/http-api.md) and gRPC (raftlock.v1.Locks; docs/grpc-api.md) on one port (empty: off)")
	fs.StringVar(&c.AdvertiseAPI, "advertise-api", "", "API address other members redirect API callers to (default: --api; set it when --api is 0.0.0.0)")
	fs.StringVar(&c.Node.DataDir, "data", "", "data directory (required)")
	fs.StringVar(&c.Node.DataDir, "dir", "", "alias of --data")
	fs.StringVar(&f.join, "join", "", "client endpoints of a running cluster to join, after raftlock member add (instead of --peers; ignored once --data holds data)")
	c.TLS.RegisterMemberFlags(fs)
	fs.StringVar(&c.ACL, "acl", "", "ACL file (JSON) of client identities, key prefixes and rights; re-read on SIGHUP (empty: every client with a certificate may do everything)")
	fs.StringVar(&f.clusterID, "cluster-id", "", "the cluster's id, 16 hex digits, the same on every member (default: the one stored in --data, else derived from --peers at the first boot); peers of another cluster are refused")
	fs.BoolVar(&c.Insecure, "insecure", false, "allow non-loopback addresses without certificates: no authentication, no encryption")
	f.RegisterTuningFlags(fs)
}

// minPeerFrameLimit is the smallest --peer-frame-limit taken: raft's
// appends are bounded to half the limit, but one log entry goes alone
// whatever its size, so a limit much below an entry's closes the stream
// that carries it. 64 KiB suits tests whose entries are small.
const minPeerFrameLimit = 64 << 10

// RegisterTuningFlags defines the flags every member of raftlock cluster
// shares: raft and snapshot tuning, ablations, logging, limits.
func (f *Flags) RegisterTuningFlags(fs *flag.FlagSet) {
	// The defaults are the node's own, filled in one place.
	n := &f.Config.Node
	n.SetDefaults()
	fs.DurationVar(&n.TickInterval, "tick", n.TickInterval, "raft tick; election timeout is 10 ticks")
	fs.Uint64Var(&n.SnapshotEvery, "snapshot-every", n.SnapshotEvery, "applied entries between snapshots (sooner once the keys changed since the last reach 64 MiB); each stores what changed since the last, and the whole table only once the changes add up to more than it")
	fs.BoolVar(&n.SnapshotByEntries, "snapshot-by-entries", n.SnapshotByEntries, "kept for older scripts: snapshots are taken every --snapshot-every entries whatever the table's size")
	fs.Uint64Var(&n.SnapshotKeep, "snapshot-keep", n.SnapshotKeep, "log entries kept behind a snapshot, so a slightly lagging follower catches up without one")
	fs.IntVar(&n.SnapshotChunkSize, "snapshot-chunk-size", peer.DefaultSnapshotChunkSize, "bytes of snapshot data per peer frame when a snapshot streams to a follower (at most --peer-frame-limit)")
	fs.IntVar(&n.PeerFrameLimit, "peer-frame-limit", peer.DefaultFrameLimit, "largest peer frame read, in bytes; the same on every member, and above raft's largest append (about 1 MiB): lower it only in tests")
	fs.IntVar(&n.MaxInflight, "max-inflight", n.MaxInflight, "raft append messages in flight per follower (1: no pipelining)")
	fs.IntVar(&n.MaxUncommitted, "max-uncommitted", n.MaxUncommitted, "entries a leader keeps proposed and not yet committed; commands decided meanwhile share the next entry (-1: no limit)")
	fs.IntVar(&n.WatchHistory, "watch-history", n.WatchHistory, "recent lock events kept for watches that resume after a revision; older resumes are answered compacted (-1: none kept, a watch resumes only from now)")
	fs.BoolVar(&n.NoBatch, "no-batch", n.NoBatch, "one command per log entry (ablation)")
	fs.BoolVar(&n.NoWriteOverlap, "no-write-overlap", n.NoWriteOverlap, "take no call or message while a log write is being synced (ablation)")
	fs.BoolVar(&n.NoHandoff, "no-handoff", n.NoHandoff, "grant a freed key's next waiter only once the release or expiry applied, not in its log entry (ablation)")
	fs.BoolVar(&f.grpcReflection, "grpc-reflection", true, "serve gRPC server reflection on the API port, so grpcurl and other generic tools can list and call raftlock.v1.Locks without its .proto (--grpc-reflection=false: off)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.BoolVar(&f.Config.FaultInjection, "fault-injection", false, "enable the chaos harness's clock control (never in production)")
	fs.StringVar(&n.Bug, "unsafe-bug", "", "plant a known bug (needs --fault-injection): "+strings.Join(node.Bugs(), ", "))
	for _, l := range f.limits() {
		fs.IntVar(l.v, l.name, l.def, l.usage)
	}
	fs.DurationVar(&f.Config.Limits.HandshakeTimeout, "handshake-timeout", server.DefaultHandshakeTimeout, "time a client connection has for its TLS handshake and greeting (the API ports: for a request's headers and body)")
	fs.DurationVar(&f.Config.Node.PeerHelloTimeout, "peer-hello-timeout", peer.DefaultHelloTimeout, "time a peer connection has for its TLS handshake and hello")
	fs.DurationVar(&f.Config.Limits.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "time a client connection with nothing in flight stays open, on every client-facing port; then the member asks its client to dial again")
	fs.BoolVar(&f.Config.Debug, "debug", false, "serve Go's /debug/pprof profiles on the --http port")
}

// limit is one resource limit's flag (README, Limits).
type limit struct {
	name  string
	v     *int
	def   int
	usage string
}

// limits are the limits' flags, in the order --help lists them.
func (f *Flags) limits() []limit {
	s, n := &f.Config.Limits, &f.Config.Node.Limits
	return []limit{
		{"max-connections", &s.MaxConns, server.DefaultMaxConns, "open client connections; one more is closed before the greeting (the client retries)"},
		{"max-inflight-per-conn", &s.MaxInflightPerConn, server.DefaultMaxInflightPerConn, "waiting acquires open on one client connection (one more is answered overloaded), and as many other requests (past them the member stops reading that connection)"},
		{"max-pending-connections", &s.MaxPendingConns, server.DefaultMaxPendingConns, "client connections still in their TLS handshake or greeting (on the API and HTTP ports: before their first request), on each port; they hold no place under --max-connections, and past it the oldest is closed"},
		{"max-pending-connections-per-address", &s.MaxPendingConnsPerAddress, server.DefaultMaxPendingConnsPerAddress, "client connections from one remote address still in their handshake or greeting; past it that address's oldest is closed"},
		{"max-connections-per-identity", &s.MaxConnsPerIdentity, 0, "client connections of one client identity (TLS certificate); one more is closed before the greeting (0: a quarter of --max-connections, 1024 by default)"},
		{"max-calls-per-identity", &s.MaxCallsPerIdentity, server.DefaultMaxCallsPerIdentity, "calls one client identity has in flight over every API (waiting acquires and gRPC KeepAlive streams included); one more is answered overloaded"},
		{"max-waiters-per-key-per-identity", &s.MaxWaitersPerKeyPerIdentity, 0, "waiting acquires one client identity may have on one key; one more is answered overloaded (0: a quarter of --max-waiters-per-key, 1024 by default)"},
		{"max-watches-per-identity", &s.MaxWatchesPerIdentity, 0, "watches one client identity has open over every API; one more is answered overloaded (0: a quarter of --max-watches, at most 256; 256 by default)"},
		{"max-watches", &s.MaxWatches, server.DefaultMaxWatches, "watches open on this member over every API; one more is answered overloaded"},
		{"max-peer-pending-connections", &f.Config.Node.MaxPeerPending, peer.DefaultMaxPending, "peer connections still in their TLS handshake or hello (they hold no member's place); past it the oldest is closed"},
		{"max-peer-pending-connections-per-address", &f.Config.Node.MaxPeerPendingPerAddr, peer.DefaultMaxPendingPerAddress, "peer connections from one remote address still in their handshake or hello; past it that address's oldest is closed"},
		{"max-peer-streams-per-member", &f.Config.Node.MaxPeerStreamsPerMember, peer.DefaultMaxStreamsPerMember, "message streams open from one member; one more closes that member's oldest"},
		{"max-pending", &n.MaxPending, node.DefaultMaxPending, "calls open in the member (queued, proposed, waiting); one more is answered overloaded"},
		{"max-waiters", &n.MaxWaiters, node.DefaultMaxWaiters, "waiting acquires over all keys; one more is answered overloaded"},
		{"max-waiters-per-key", &n.MaxWaitersPerKey, node.DefaultMaxWaitersPerKey, "waiting acquires on one key; one more is answered overloaded"},
		{"max-keys", &n.MaxKeys, node.DefaultMaxKeys, "keys held; an acquire of one more key is answered overloaded"},
	}
}

// Logger is the member's logger, as --log-level and --log-format ask.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, cliflag.Usagef("bad --log-level %q", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch f.logFormat {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, cliflag.Usagef("bad --log-format %q: want text or json", f.logFormat)
}

// Validate checks the member's flags against its peers (usage errors).
func (f *Flags) Validate(peers map[uint64]string) error {
	n := &f.Config.Node
	switch {
	case n.ID == 0:
		return cliflag.Usagef("--id is required")
	case n.DataDir == "":
		return cliflag.Usagef("--data is required")
	}
	for _, a := range []struct{ flag, addr string }{{"--listen", f.Config.Listen}, {"--http", f.Config.HTTP}, {"--api", f.Config.API}, {"--metrics-listen", f.Config.MetricsListen}, {"--peer-listen", n.PeerListen}} {
		if err := cliflag.ListenAddr(a.flag, a.addr); err != nil {
			return err
		}
	}
	if _, ok := peers[n.ID]; !ok {
		return cliflag.Usagef("--id %d is not in --peers (members %s)", n.ID, clusterstatus.JoinIDs(slices.Sorted(maps.Keys(peers))))
	}
	if err := f.Config.TLS.Check(); err != nil {
		return cliflag.Usagef("%v", err)
	}
	if n.Bug != "" && !f.Config.FaultInjection {
		return cliflag.Usagef("--unsafe-bug needs --fault-injection")
	}
	if n.Bug != "" && !slices.Contains(node.Bugs(), n.Bug) {
		return cliflag.Usagef("unknown --unsafe-bug %q: want one of %s", n.Bug, strings.Join(node.Bugs(), ", "))
	}
	for _, l := range f.limits() {
		// A limit whose default is 0 is derived from another (a share
		// of it): 0 asks for that.
		if *l.v < 0 || (*l.v == 0 && l.def != 0) {
			return cliflag.Usagef("--%s must be > 0, got %d", l.name, *l.v)
		}
	}
	switch {
	case n.PeerFrameLimit < minPeerFrameLimit:
		return cliflag.Usagef("--peer-frame-limit %d is below %d: peer streams would close on ordinary appends (keep it above 1 MiB outside tests)", n.PeerFrameLimit, minPeerFrameLimit)
	case n.SnapshotChunkSize <= 0:
		return cliflag.Usagef("--snapshot-chunk-size %d must be > 0", n.SnapshotChunkSize)
	case n.SnapshotChunkSize > n.PeerFrameLimit:
		return cliflag.Usagef("--snapshot-chunk-size %d must be at most --peer-frame-limit %d (lower --snapshot-chunk-size with it)", n.SnapshotChunkSize, n.PeerFrameLimit)
	}
	return nil
}

// MemberConfig checks the flags' settings (Validate) and makes them a
// member's, with its peers and, for a joiner, how it joins.
func (f *Flags) MemberConfig(peers map[uint64]string, join *node.Join) (Config, error) {
	if err := f.Validate(peers); err != nil {
		return Config{}, err
	}
	cfg := f.Config
	cfg.NoGRPCReflection = !f.grpcReflection
	if f.clusterID != "" {
		id, err := peer.ParseClusterID(f.clusterID)
		if err != nil {
			return Config{}, cliflag.Usagef("--cluster-id: %v", err)
		}
		cfg.Node.ClusterID = id
	}
	cfg.Node.Peers, cfg.Node.Join = peers, join
	return cfg, nil
}

// Peers decides how a member starts: bootstrapping with --peers, or
// joining a running cluster with --join (it asks that cluster for its
// configuration, PlanJoin, within 10 s). A data directory with a stored
// identity restarts from its own log whatever the flags say: only this
// member's peer address is taken from them. The identity, not any data,
// is what makes a directory a member's: a joiner's first start writes it
// last (node.New), so a joiner cut short before it (its store seeded, say)
// joins again, with the cluster's id, instead of restarting as a member of
// no cluster. Errors of the flags are usage errors; the cluster's answer
// is wrapped as the client gave it.
func (f *Flags) Peers(ctx context.Context, log *slog.Logger) (map[uint64]string, *node.Join, error) {
	if f.join == "" {
		peers, err := ParsePeers(f.peers)
		if err != nil {
			return nil, nil, cliflag.Usagef("--peers: %v", err)
		}
		return peers, nil, nil
	}
	n := &f.Config.Node
	switch {
	case f.peers != "":
		return nil, nil, cliflag.Usagef("--join and --peers exclude each other: --peers bootstraps a new cluster, --join enters a running one")
	case n.ID == 0:
		return nil, nil, cliflag.Usagef("--id is required")
	case n.DataDir == "":
		return nil, nil, cliflag.Usagef("--data is required")
	}
	eps, err := cliflag.Endpoints(f.join)
	if err != nil {
		return nil, nil, cliflag.Usagef("--join: %v", strings.TrimPrefix(err.Error(), "--endpoints: "))
	}
	isMember, err := peer.HasIdentity(n.DataDir)
	if err != nil {
		return nil, nil, err
	}
	if isMember {
		if n.PeerListen == "" {
			return nil, nil, cliflag.Usagef("--peer-listen is required with --join")
		}
		log.Info("the data directory is a member's: --join is ignored and the member restarts from its log", "member", n.ID, "data", n.DataDir)
		return map[uint64]string{n.ID: n.PeerListen}, nil, nil
	}
	plan, err := f.planJoin(ctx, eps)
	if err != nil {
		return nil, nil, err
	}
	if n.PeerListen == "" {
		n.PeerListen = plan.PeerAddr
	}
	log.Info("joining the cluster", "member", n.ID, "as", plan.Role, "peer_addr", plan.PeerAddr, "members", plan.Members)
	return map[uint64]string{n.ID: plan.PeerAddr}, plan.Join, nil
}

// planJoin asks the cluster at eps, with the member's certificates, how
// this member joins it.
func (f *Flags) planJoin(ctx context.Context, eps []string) (*JoinPlan, error) {
	tc, err := f.Config.TLS.ClientConfig()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(eps, client.Options{TLS: tc})
	if err != nil {
		return nil, cliflag.WithCode(cliflag.ExitUsage, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	plan, err := PlanJoin(ctx, cl, f.Config.Node.ID)
	if err != nil {
		return nil, fmt.Errorf("join through %s: %w", f.join, err)
	}
	return plan, nil
}

// DefaultLocalData is where raftlock cluster keeps its members' data
// unless told otherwise, as etcd keeps default.etcd: in the current
// directory, so a restart finds the same locks and tokens.
const DefaultLocalData = "raftlock-data"

// LocalFlags are raftlock cluster's flags: how many members, their data
// directory and port ranges, and the tuning they all share.
type LocalFlags struct {
	Flags
	Nodes                                   int
	Dir                                     string
	PeerPort, ClientPort, HTTPPort, APIPort int
}

// RegisterFlags defines raftlock cluster's flags on fs.
func (l *LocalFlags) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&l.Nodes, "nodes", 3, "number of members (1..9)")
	fs.StringVar(&l.Dir, "data", DefaultLocalData, "data directory, one subdirectory per member, reused on restart")
	fs.StringVar(&l.Dir, "dir", DefaultLocalData, "alias of --data")
	fs.IntVar(&l.PeerPort, "peer-port", 7001, "raft port of member 1 (member N uses this + N-1)")
	fs.IntVar(&l.ClientPort, "client-port", 8001, "client port of member 1")
	fs.IntVar(&l.HTTPPort, "http-port", 9001, "HTTP port of member 1")
	fs.IntVar(&l.APIPort, "api-port", 10001, "API port (HTTP/JSON and gRPC) of member 1 (0: no API)")
	l.RegisterTuningFlags(fs)
}

// Check refuses a number of members or a data directory no cluster can
// have (usage errors).
func (l *LocalFlags) Check() error {
	switch {
	case l.Nodes < 1 || l.Nodes > 9:
		return cliflag.Usagef("--nodes must be 1..9")
	case l.Dir == "":
		return cliflag.Usagef("--data must name a directory")
	}
	return nil
}

// ports are the cluster's port ranges: peer, client, HTTP, and the API's
// unless --api-port is 0.
func (l *LocalFlags) ports() []PortRange {
	ports := []PortRange{{Name: "--peer-port", Port: l.PeerPort}, {Name: "--client-port", Port: l.ClientPort}, {Name: "--http-port", Port: l.HTTPPort}}
	if l.APIPort != 0 {
		ports = append(ports, PortRange{Name: "--api-port", Port: l.APIPort})
	}
	return ports
}

// Start checks the ports, the data directory and the members' settings
// before anything is created, then starts the members (StartLocal);
// reused says the directory held the cluster's data already.
func (l *LocalFlags) Start(log *slog.Logger) (members []*Member, reused bool, err error) {
	ports := l.ports()
	if err := CheckPortRanges(ports, l.Nodes); err != nil {
		return nil, false, cliflag.WithCode(cliflag.ExitUsage, err)
	}
	size, err := LocalSize(l.Dir)
	if err != nil {
		return nil, false, err
	}
	if size > 0 && size != l.Nodes {
		return nil, false, cliflag.Usagef("%s holds a %d-member cluster; run with --nodes %d, or give another --data", l.Dir, size, size)
	}
	if err := CheckPortsFree(ports, l.Nodes); err != nil {
		return nil, false, err
	}
	peers := map[uint64]string{}
	for i := 1; i <= l.Nodes; i++ {
		peers[uint64(i)] = ports[0].Addr(i)
	}
	// The members share every tuning flag: checking member 1's checks all,
	// before anything is created.
	first := l.Flags
	first.Config.Node.ID, first.Config.Node.DataDir = 1, LocalDataDir(l.Dir, 1)
	if err := first.Validate(peers); err != nil {
		return nil, false, err
	}
	members, err = StartLocal(l.Dir, l.Nodes, func(id int) (Config, error) {
		mf := l.Flags
		mf.Config.Node.ID, mf.Config.Listen, mf.Config.HTTP, mf.Config.Node.DataDir = uint64(id), ports[1].Addr(id), ports[2].Addr(id), LocalDataDir(l.Dir, id)
		if len(ports) > 3 {
			mf.Config.API = ports[3].Addr(id)
		}
		return mf.MemberConfig(peers, nil)
	}, log)
	return members, size > 0, err
}

// WriteSummary says where the cluster's data and endpoints are, as
// raftlock cluster prints once its members started.
func (l *LocalFlags) WriteSummary(w io.Writer, reused bool) {
	ports := l.ports()
	var endpoints []string
	for id := 1; id <= l.Nodes; id++ {
		endpoints = append(endpoints, ports[1].Addr(id))
	}
	sort.Strings(endpoints)
	abs, err := filepath.Abs(l.Dir)
	if err != nil {
		abs = l.Dir
	}
	state := "new"
	if reused {
		state = "reused: locks and tokens carry on; remove it for a fresh cluster"
	}
	http := l.HTTPPort
	fmt.Fprintf(w, "raftlock cluster: %s, data in %s (%s)\n", cliflag.Plural(l.Nodes, "member", "members"), abs, state)
	fmt.Fprintf(w, "endpoints: %s\n", strings.Join(endpoints, ","))
	fmt.Fprintf(w, "metrics:   http://127.0.0.1:%d/metrics (%d..%d)\n", http, http, http+l.Nodes-1)
	fmt.Fprintf(w, "console:   http://127.0.0.1:%d/ (any member's)\n", http)
	if api := l.APIPort; api != 0 {
		fmt.Fprintf(w, "api:       http://127.0.0.1:%d (HTTP/JSON and gRPC; %d..%d)\n", api, api, api+l.Nodes-1)
	}
	fmt.Fprintln(w, "Ctrl-C to stop.")
}

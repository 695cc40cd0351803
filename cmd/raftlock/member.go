package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/peer"
)

// memberFlags are the settings of one member: cfg holds what the flags
// set directly, with the node's own defaults.
type memberFlags struct {
	cfg       embed.Config
	peers     string
	join      string // client endpoints of the cluster to join (join.go)
	logLevel  string
	logFormat string
	sec       securityFlags // security.go
	limits    limitFlags
}

func (m *memberFlags) register(fs *flag.FlagSet) {
	fs.Uint64Var(&m.cfg.Node.ID, "id", 0, "member id (required, > 0)")
	fs.StringVar(&m.peers, "peers", "", "every member's raft address: 1=127.0.0.1:7001,2=...")
	fs.StringVar(&m.cfg.Listen, "listen", "127.0.0.1:8001", "client API address to listen on")
	fs.StringVar(&m.cfg.Advertise, "advertise-client", "", "client address other members give out in redirects (default: --listen; set it when --listen is 0.0.0.0)")
	fs.StringVar(&m.cfg.Node.PeerListen, "peer-listen", "", "raft address to listen on (default: this member's address in --peers, which is what the others dial)")
	fs.StringVar(&m.cfg.HTTP, "http", "", "HTTP address for /metrics, /status, /healthz (empty: off)")
	fs.StringVar(&m.cfg.Node.DataDir, "data", "", "data directory (required)")
	fs.StringVar(&m.cfg.Node.DataDir, "dir", "", "alias of --data")
	fs.StringVar(&m.join, "join", "", "client endpoints of a running cluster to join, after raftlock member add (instead of --peers; ignored once --data holds data)")
	m.sec.register(fs)
	m.registerTuning(fs)
}

// minPeerFrameLimit is the smallest --peer-frame-limit taken: raft's
// appends are bounded to half the limit, but one log entry goes alone
// whatever its size, so a limit much below an entry's closes the stream
// that carries it. 64 KiB suits tests whose entries are small.
const minPeerFrameLimit = 64 << 10

func (m *memberFlags) registerTuning(fs *flag.FlagSet) {
	// The defaults are the node's own, filled in one place.
	n := &m.cfg.Node
	n.SetDefaults()
	fs.DurationVar(&n.TickInterval, "tick", n.TickInterval, "raft tick; election timeout is 10 ticks")
	fs.Uint64Var(&n.SnapshotEvery, "snapshot-every", n.SnapshotEvery, "applied entries between snapshots; a snapshot also waits until the log since the last one is as big as the lock table, when that is over 1 MiB (see --snapshot-by-entries)")
	fs.BoolVar(&n.SnapshotByEntries, "snapshot-by-entries", n.SnapshotByEntries, "snapshot every --snapshot-every entries whatever the table's size (harnesses that want big snapshots often; costs a full table write each time)")
	fs.Uint64Var(&n.SnapshotKeep, "snapshot-keep", n.SnapshotKeep, "log entries kept behind a snapshot, so a slightly lagging follower catches up without one")
	fs.IntVar(&n.SnapshotChunkSize, "snapshot-chunk-size", peer.DefaultSnapshotChunkSize, "bytes of snapshot data per peer frame when a snapshot streams to a follower (at most --peer-frame-limit)")
	fs.IntVar(&n.PeerFrameLimit, "peer-frame-limit", peer.DefaultFrameLimit, "largest peer frame read, in bytes; the same on every member, and above raft's largest append (about 1 MiB): lower it only in tests")
	fs.IntVar(&n.MaxInflight, "max-inflight", n.MaxInflight, "raft append messages in flight per follower (1: no pipelining)")
	fs.IntVar(&n.MaxUncommitted, "max-uncommitted", n.MaxUncommitted, "entries a leader keeps proposed and not yet committed; commands decided meanwhile share the next entry (-1: no limit)")
	fs.BoolVar(&n.NoBatch, "no-batch", n.NoBatch, "one command per log entry (ablation)")
	fs.BoolVar(&n.NoWriteOverlap, "no-write-overlap", n.NoWriteOverlap, "take no call or message while a log write is being synced (ablation)")
	fs.BoolVar(&n.NoHandoff, "no-handoff", n.NoHandoff, "grant a freed key's next waiter only once the release or expiry applied, not in its log entry (ablation)")
	fs.StringVar(&m.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&m.logFormat, "log-format", "text", "text or json")
	fs.BoolVar(&m.cfg.FaultInjection, "fault-injection", false, "enable the chaos harness's clock control (never in production)")
	fs.StringVar(&m.cfg.Node.Bug, "unsafe-bug", "", "plant a known bug (needs --fault-injection): "+strings.Join(node.Bugs(), ", "))
	m.limits.register(fs)
}

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("bad --log-format %q: want text or json", format)
}

// validate checks the member's flags against its peers.
func (m *memberFlags) validate(peers map[uint64]string) error {
	if m.cfg.Node.ID == 0 {
		return usageErr("--id is required")
	}
	if m.cfg.Node.DataDir == "" {
		return usageErr("--data is required")
	}
	if _, ok := peers[m.cfg.Node.ID]; !ok {
		return usageErr("--id %d is not in --peers (members %s)", m.cfg.Node.ID, joinIDs(slices.Sorted(maps.Keys(peers))))
	}
	if err := m.sec.files.Check(); err != nil {
		return usageErr("%v", err)
	}
	if m.cfg.Node.Bug != "" && !m.cfg.FaultInjection {
		return usageErr("--unsafe-bug needs --fault-injection")
	}
	if m.cfg.Node.Bug != "" && !slices.Contains(node.Bugs(), m.cfg.Node.Bug) {
		return usageErr("unknown --unsafe-bug %q: want one of %s", m.cfg.Node.Bug, strings.Join(node.Bugs(), ", "))
	}
	if err := m.limits.validate(); err != nil {
		return err
	}
	switch {
	case m.cfg.Node.PeerFrameLimit < minPeerFrameLimit:
		return usageErr("--peer-frame-limit %d is below %d: peer streams would close on ordinary appends (keep it above 1 MiB outside tests)", m.cfg.Node.PeerFrameLimit, minPeerFrameLimit)
	case m.cfg.Node.SnapshotChunkSize <= 0:
		return usageErr("--snapshot-chunk-size %d must be > 0", m.cfg.Node.SnapshotChunkSize)
	case m.cfg.Node.SnapshotChunkSize > m.cfg.Node.PeerFrameLimit:
		return usageErr("--snapshot-chunk-size %d must be at most --peer-frame-limit %d (lower --snapshot-chunk-size with it)", m.cfg.Node.SnapshotChunkSize, m.cfg.Node.PeerFrameLimit)
	}
	return nil
}

// startMember starts one member (embed.Start) with the flags' settings.
func startMember(m memberFlags, peers map[uint64]string, join *node.Join, log *slog.Logger) (*embed.Member, error) {
	cfg, err := memberConfig(m, peers, join)
	if err != nil {
		return nil, err
	}
	return embed.Start(cfg, log)
}

// memberConfig checks the flags' settings and makes them a member's.
func memberConfig(m memberFlags, peers map[uint64]string, join *node.Join) (embed.Config, error) {
	if err := m.validate(peers); err != nil {
		return embed.Config{}, err
	}
	var clusterID uint64
	if m.sec.clusterID != "" {
		id, err := peer.ParseClusterID(m.sec.clusterID)
		if err != nil {
			return embed.Config{}, usageErr("--cluster-id: %v", err)
		}
		clusterID = id
	}
	cfg := m.cfg
	cfg.Node.Peers, cfg.Node.Join, cfg.Node.ClusterID, cfg.Node.Limits = peers, join, clusterID, m.limits.node()
	cfg.TLS, cfg.ACL, cfg.Insecure = m.sec.files, m.sec.acl, m.sec.insecure
	cfg.Debug, cfg.Limits = m.limits.debug, m.limits.server()
	return cfg, nil
}

func waitForSignal() os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(ch)
	return <-ch
}

func runNode(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("node", "node --id N --peers 1=HOST:PORT,... --listen HOST:PORT --http HOST:PORT --data DIR")
	var m memberFlags
	m.register(fs)
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	log, err := newLogger(m.logLevel, m.logFormat, stderr)
	if err != nil {
		return withCode(exitUsage, err)
	}
	peers, join, err := memberPeers(&m, log)
	if err != nil {
		return err
	}
	mb, err := startMember(m, peers, join, log)
	if err != nil {
		return err
	}
	mlog := log.With("member", m.cfg.Node.ID)
	mlog.Info("member running", "raft", peers[m.cfg.Node.ID], "client", m.cfg.Listen, "http", m.cfg.HTTP, "data", m.cfg.Node.DataDir, "tls", mb.TLS())
	hupCtx, stopHUP := context.WithCancel(context.Background())
	defer stopHUP()
	reloadOnHUP(hupCtx, []*embed.Member{mb})
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	select {
	case sig := <-sigc:
		mlog.Info("stopping", "signal", sig.String())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := mb.Shutdown(ctx); err != nil {
			mlog.Warn("member stopped with an error", "err", err)
		}
		return nil
	case <-mb.Node().Done():
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return mb.Stopped(ctx)
	}
}

// defaultClusterData is where `raftlock cluster` keeps its members' data
// unless told otherwise, as etcd keeps default.etcd: in the current
// directory, so a restart finds the same locks and tokens.
const defaultClusterData = "raftlock-data"

// dataFlag registers the data-directory flag every command names --data,
// with --dir accepted as an alias.
func dataFlag(fs *flag.FlagSet, def, usage string) *string {
	dir := fs.String("data", def, usage)
	fs.StringVar(dir, "dir", def, "alias of --data")
	return dir
}

func runCluster(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster", "cluster [--nodes 3] [--data DIR]")
	nodes := fs.Int("nodes", 3, "number of members (1..9)")
	dir := dataFlag(fs, defaultClusterData, "data directory, one subdirectory per member, reused on restart")
	peerPort := fs.Int("peer-port", 7001, "raft port of member 1 (member N uses this + N-1)")
	clientPort := fs.Int("client-port", 8001, "client port of member 1")
	httpPort := fs.Int("http-port", 9001, "HTTP port of member 1")
	var m memberFlags
	m.registerTuning(fs)
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	if *nodes < 1 || *nodes > 9 {
		return usageErr("--nodes must be 1..9")
	}
	if *dir == "" {
		return usageErr("--data must name a directory")
	}
	log, err := newLogger(m.logLevel, m.logFormat, stderr)
	if err != nil {
		return withCode(exitUsage, err)
	}
	ports := []embed.PortRange{{Name: "--peer-port", Port: *peerPort}, {Name: "--client-port", Port: *clientPort}, {Name: "--http-port", Port: *httpPort}}
	reused, err := checkCluster(*dir, *nodes, ports)
	if err != nil {
		return err
	}
	peers := map[uint64]string{}
	for i := 1; i <= *nodes; i++ {
		peers[uint64(i)] = ports[0].Addr(i)
	}
	// The members share every tuning flag: checking member 1's checks all,
	// before anything is created.
	first := m
	first.cfg.Node.ID, first.cfg.Node.DataDir = 1, embed.LocalDataDir(*dir, 1)
	if err := first.validate(peers); err != nil {
		return err
	}
	members, err := embed.StartLocal(*dir, *nodes, func(id int) (embed.Config, error) {
		mf := m
		mf.cfg.Node.ID, mf.cfg.Listen, mf.cfg.HTTP, mf.cfg.Node.DataDir = uint64(id), ports[1].Addr(id), ports[2].Addr(id), embed.LocalDataDir(*dir, id)
		return memberConfig(mf, peers, nil)
	}, log)
	if err != nil {
		return err
	}
	defer func() {
		for _, mb := range members {
			mb.Close()
		}
	}()
	printCluster(stdout, *dir, *nodes, reused, ports)
	waitForSignal()
	fmt.Fprintln(stdout, "stopping")
	return nil
}

// checkCluster checks cluster's ports and data directory before anything
// starts; reused says the directory holds the cluster's data already.
func checkCluster(dir string, nodes int, ports []embed.PortRange) (reused bool, err error) {
	if err := embed.CheckPortRanges(ports, nodes); err != nil {
		return false, withCode(exitUsage, err)
	}
	size, err := embed.LocalSize(dir)
	if err != nil {
		return false, err
	}
	if size > 0 && size != nodes {
		return false, usageErr("%s holds a %d-member cluster; run with --nodes %d, or give another --data", dir, size, size)
	}
	return size > 0, embed.CheckPortsFree(ports, nodes)
}

// printCluster says where the cluster's data and endpoints are.
func printCluster(stdout io.Writer, dir string, nodes int, reused bool, ports []embed.PortRange) {
	var endpoints []string
	for id := 1; id <= nodes; id++ {
		endpoints = append(endpoints, ports[1].Addr(id))
	}
	sort.Strings(endpoints)
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	state := "new"
	if reused {
		state = "reused: locks and tokens carry on; remove it for a fresh cluster"
	}
	http := ports[2].Port
	fmt.Fprintf(stdout, "raftlock cluster: %s, data in %s (%s)\n", plural(nodes, "member", "members"), abs, state)
	fmt.Fprintf(stdout, "endpoints: %s\n", strings.Join(endpoints, ","))
	fmt.Fprintf(stdout, "metrics:   http://127.0.0.1:%d/metrics (%d..%d)\n", http, http, http+nodes-1)
	fmt.Fprintln(stdout, "Ctrl-C to stop.")
}

// plural is "1 member", "3 members".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/internal/procgroup"
	"github.com/raftlock/raftlock/internal/promtext"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/node/embed"
)

// RaftlockConfig starts a local raftlock cluster for the bench.
type RaftlockConfig struct {
	Bin       string // the raftlock executable
	Dir       string
	Nodes     int
	NoBatch   bool
	NoHandoff bool
	// NoWriteOverlap starts the members with --no-write-overlap.
	NoWriteOverlap bool
	MaxInflight    int // 0: the node's default
	MaxUncommitted int // 0: the node's default
	Lease          time.Duration
	Name           string // system name in results (default "raftlock")
	// TLS: a fresh CA and member certificates are written under
	// Dir/tls, the members serve mutual TLS 1.3 on every port, and the
	// bench client connects with a client certificate of the same CA.
	TLS bool
	// SnapshotEvery and SnapshotKeep are every member's --snapshot-every
	// and --snapshot-keep (0: the node's defaults); MaxKeys its --max-keys
	// (0: the node's default), raised for a table of held locks.
	SnapshotEvery, SnapshotKeep uint64
	MaxKeys                     int
	// MemberProcs is every member's GOMAXPROCS (0: the machine's cores
	// shared among the members, shareCores).
	MemberProcs int
	// Protocol is what the measured sessions speak (bench --protocol):
	// binary ("" too) on the client port, or grpc or http on the API port
	// every member then serves.
	Protocol string
	// ViaFollower sends the API protocol's calls to one follower, which
	// relays them to the leader (bench --via-follower).
	ViaFollower bool
	// Ports picks n ports for the members to listen on (nil: freePorts,
	// free ones below the kernel's ephemeral range).
	Ports func(n int) ([]int, error)
}

// benchMember is one member the bench started.
type benchMember struct {
	id                 int
	client, http, peer string
	api                string // "": none (RaftlockConfig.Protocol binary)
	proc               *procgroup.Proc
}

type raftlockTarget struct {
	name  string
	lease time.Duration
	cl    *client.Client
	calls lockCalls // what the sessions call: cl, or an API client
	procs *procgroup.Group
	// members, for a cluster the bench started, in the order of their
	// client endpoints; with the command line to start one more.
	members  []*benchMember
	bin, dir string
	tuning   embed.Args // the settings every member gets, a joiner's too
	nextID   int
	// metrics scrapes the members' /metrics: plain HTTP, or HTTPS with the
	// bench's client certificate when the cluster runs TLS.
	metrics *http.Client
	scheme  string
	// ledger has what the bench's clients may still hold, for settle.
	ledger ledger
}

// benchCerts writes a CA, n member certificates and the client certificate
// "bench" into dir, and returns the client's files.
func benchCerts(dir string, n int) (tlsconfig.Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tlsconfig.Files{}, err
	}
	if _, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: dir, Members: n, Clients: []string{"bench"}, Force: true}); err != nil {
		return tlsconfig.Files{}, fmt.Errorf("certificates: %w", err)
	}
	return tlsconfig.Files{Cert: filepath.Join(dir, "client-bench.pem"), Key: filepath.Join(dir, "client-bench-key.pem"),
		CA: filepath.Join(dir, "ca.pem")}, nil
}

// startAttempts bounds how many times StartRaftlock picks new ports after
// a member found one of its ports taken.
const startAttempts = 3

// errPortTaken is a member's exit while starting because another process
// bound one of its ports between their pick and its listen.
var errPortTaken = errors.New("a port picked for the member was taken before it listened")

// StartRaftlock starts cfg.Nodes `raftlock node` processes and waits until
// each of them answers. Ports are picked free and then bound by the member,
// so another process on the machine may take one in between: the member
// exits, and the cluster starts again on new ports, in member directories
// of its own making (directories that were there before are reused, never
// cleared, so then there is no second attempt). A benchmark of a cluster
// short of a member would measure something else.
func StartRaftlock(ctx context.Context, cfg RaftlockConfig) (Target, error) {
	attempts := startAttempts
	for id := 1; id <= cfg.Nodes; id++ {
		if _, err := os.Stat(memberDir(cfg.Dir, id)); err == nil {
			attempts = 1
		}
	}
	for attempt := 1; ; attempt++ {
		t, err := startRaftlock(ctx, cfg)
		if !errors.Is(err, errPortTaken) || attempt == attempts {
			return t, err
		}
		for id := 1; id <= cfg.Nodes; id++ {
			if err := os.RemoveAll(memberDir(cfg.Dir, id)); err != nil {
				return nil, fmt.Errorf("clear member %d's directory after a port was taken: %w", id, err)
			}
			if err := os.Remove(memberDir(cfg.Dir, id) + ".log"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("clear member %d's log after a port was taken: %w", id, err)
			}
		}
	}
}

func startRaftlock(ctx context.Context, cfg RaftlockConfig) (Target, error) {
	pick := cfg.Ports
	if pick == nil {
		pick = freePorts
	}
	ports, err := pick(3 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	members := make([]*benchMember, cfg.Nodes)
	peers := map[uint64]string{}
	var eps []string
	for i := range members {
		m := &benchMember{id: i + 1, peer: fmt.Sprintf("127.0.0.1:%d", ports[3*i]),
			client: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]), http: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])}
		members[i] = m
		peers[uint64(m.id)] = m.peer
		eps = append(eps, m.client)
	}
	apis, err := apiAddrs(cfg.Protocol, members)
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	certDir := filepath.Join(cfg.Dir, "tls")
	if cfg.TLS {
		files, err := benchCerts(certDir, cfg.Nodes)
		if err != nil {
			return nil, err
		}
		r, err := tlsconfig.Load(files)
		if err != nil {
			return nil, err
		}
		tc = r.ClientConfig()
	}
	tuning := cfg.tuning()
	g := &procgroup.Group{Env: shareCores(cfg.Nodes)}
	if cfg.MemberProcs > 0 {
		g.Env = []string{fmt.Sprintf("GOMAXPROCS=%d", cfg.MemberProcs)}
	}
	for _, m := range members {
		a := tuning
		a.ID, a.Peers, a.Listen, a.HTTP, a.API, a.Data = uint64(m.id), peers, m.client, m.http, m.api, memberDir(cfg.Dir, m.id)
		if cfg.TLS {
			c := filepath.Join(certDir, fmt.Sprintf("member-%d", m.id))
			a.TLS = tlsconfig.Files{Cert: c + ".pem", Key: c + "-key.pem", CA: filepath.Join(certDir, "ca.pem")}
		}
		if m.proc, err = g.Start(cfg.Bin, a.Argv(), memberDir(cfg.Dir, m.id)+".log"); err != nil {
			g.Stop()
			return nil, err
		}
	}
	name := cfg.Name
	if name == "" {
		name = "raftlock"
	}
	t, err := newRaftlockTarget(name, eps, cfg.Lease, tc)
	if err != nil {
		g.Stop()
		return nil, err
	}
	t.procs, t.members, t.bin, t.dir, t.tuning, t.nextID = g, members, cfg.Bin, cfg.Dir, tuning, cfg.Nodes+1
	if t.calls, err = dialCalls(cfg.Protocol, t.cl, apis, tc); err != nil {
		t.Close()
		return nil, err
	}
	if err := t.waitEveryMember(ctx); err != nil {
		t.Close()
		return nil, err
	}
	if cfg.ViaFollower {
		if err := t.dialFollower(ctx, cfg.Protocol, tc); err != nil {
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

// dialFollower replaces the sessions' API client with one kept to a
// follower that never asks to be redirected: every call is relayed.
func (t *raftlockTarget) dialFollower(ctx context.Context, protocol string, tc *tls.Config) error {
	for _, m := range t.members {
		st, err := t.cl.Status(ctx, m.client)
		if err != nil || st.Role != "follower" || st.Leader == 0 {
			continue
		}
		opts := apiclient.Options{TLS: tc, Relayed: true}
		var calls lockCalls
		if protocol == apiclient.ProtocolHTTP {
			calls, err = apiclient.NewHTTP([]string{m.api}, opts)
		} else {
			calls, err = apiclient.NewGRPC([]string{m.api}, opts)
		}
		if err != nil {
			return err
		}
		t.calls.Close()
		t.calls = calls
		return nil
	}
	return errors.New("--via-follower: no member is a follower that knows its leader")
}

// waitEveryMember waits until the cluster answers a probe through the
// sessions' protocol (so its port is up too) and every member answers a
// status request. A member that exited ends the wait: two of three would
// leave no quorum to answer the probe until the start's time runs out.
func (t *raftlockTarget) waitEveryMember(ctx context.Context) error {
	pctx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	probe := func(ctx context.Context) error {
		for _, m := range t.members {
			if !m.proc.Running() {
				stopProbe()
				return exitedWhileStarting(m)
			}
		}
		_, err := t.calls.Get(ctx, "bench-probe")
		return err
	}
	if err := waitUntil(pctx, "raftlock", probe); err != nil {
		return err
	}
	for _, m := range t.members {
		if _, err := t.waitAnswers(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// AblationName is "raftlock" followed by the ablations cfg runs, as
// their flags spell them ("raftlock --no-batch --tls").
func (cfg RaftlockConfig) AblationName() string {
	name := "raftlock"
	for _, f := range []struct {
		on   bool
		flag string
	}{
		{cfg.NoBatch, " --no-batch"}, {cfg.NoHandoff, " --no-handoff"}, {cfg.NoWriteOverlap, " --no-write-overlap"},
		{cfg.MaxInflight > 0, fmt.Sprintf(" --max-inflight %d", cfg.MaxInflight)},
		{cfg.MaxUncommitted != 0, fmt.Sprintf(" --max-uncommitted %d", cfg.MaxUncommitted)},
		{cfg.TLS, " --tls"}, {usesAPI(cfg.Protocol), " --protocol " + cfg.Protocol}, {cfg.ViaFollower, " --via-follower"},
	} {
		if f.on {
			name += f.flag
		}
	}
	return name
}

// tuning is the settings every member of the cluster gets, a joiner's too.
func (cfg RaftlockConfig) tuning() embed.Args {
	return embed.Args{LogLevel: "warn", NoBatch: cfg.NoBatch, NoHandoff: cfg.NoHandoff, NoOverlap: cfg.NoWriteOverlap,
		MaxInflight: max(cfg.MaxInflight, 0), MaxUncommitted: cfg.MaxUncommitted,
		SnapshotEvery: cfg.SnapshotEvery, SnapshotKeep: cfg.SnapshotKeep, MaxKeys: max(cfg.MaxKeys, 0)}
}

func memberDir(dir string, id int) string { return filepath.Join(dir, fmt.Sprintf("raftlock-%d", id)) }

// RaftlockEndpoints targets a running cluster (no CPU or log accounting);
// tc, when not nil, is the clients' TLS configuration for a secured cluster.
func RaftlockEndpoints(ctx context.Context, endpoints []string, lease time.Duration, tc *tls.Config) (Target, error) {
	t, err := newRaftlockTarget("raftlock", endpoints, lease, tc)
	if err != nil {
		return nil, err
	}
	if err := waitUntil(ctx, "raftlock", func(ctx context.Context) error { _, err := t.cl.Get(ctx, "bench-probe"); return err }); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func newRaftlockTarget(name string, eps []string, lease time.Duration, tc *tls.Config) (*raftlockTarget, error) {
	cl, err := client.New(eps, client.Options{TLS: tc})
	if err != nil {
		return nil, err
	}
	t := &raftlockTarget{name: name, lease: lease, cl: cl, calls: cl, metrics: http.DefaultClient, scheme: "http"}
	if tc != nil {
		t.metrics = &http.Client{Transport: &http.Transport{TLSClientConfig: tc.Clone()}}
		t.scheme = "https"
	}
	return t, nil
}

func (t *raftlockTarget) Name() string { return t.name }

func (t *raftlockTarget) PIDs() []int {
	if t.procs == nil {
		return nil
	}
	return t.procs.PIDs()
}

// All sessions share one client: calls from every session are pipelined
// over one connection per member, as a Go service would use it.
func (t *raftlockTarget) NewSession(ctx context.Context, i int) (Session, error) {
	return raftlockSession{t}, nil
}

func (t *raftlockTarget) RaftStats(ctx context.Context) (RaftStats, bool) {
	var best RaftStats
	found := false
	for _, mb := range t.members {
		m, err := scrapeWith(ctx, t.metrics, t.metricsURL(mb), "raftlock_is_leader", "raftlock_entries_persisted_total",
			"raftlock_fsyncs_total", "raftlock_commands_applied_total", "raftlock_entries_applied_total",
			"go_gc_duration_seconds_count", "raftlock_snapshots_total", "raftlock_snapshot_seconds_sum",
			"raftlock_leader_changes_total", "raftlock_storage_write_stalls_total")
		if err != nil {
			continue
		}
		best.Events = best.Events.plus(ClusterEvents{GCCycles: m["go_gc_duration_seconds_count"], Snapshots: m["raftlock_snapshots_total"],
			SnapshotSeconds: m["raftlock_snapshot_seconds_sum"], LeaderChanges: m["raftlock_leader_changes_total"],
			WriteStalls: m["raftlock_storage_write_stalls_total"]}, 1)
		if m["raftlock_is_leader"] != 1 {
			continue
		}
		best.Entries, best.Fsyncs = m["raftlock_entries_persisted_total"], m["raftlock_fsyncs_total"]
		best.Commands, best.Applied = m["raftlock_commands_applied_total"], m["raftlock_entries_applied_total"]
		found = true
	}
	return best, found
}

func (t *raftlockTarget) metricsURL(m *benchMember) string {
	return t.scheme + "://" + m.http + "/metrics"
}

func (t *raftlockTarget) Close() error {
	t.calls.Close()
	t.cl.Close()
	if tr, ok := t.metrics.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	if t.procs != nil {
		t.procs.Stop()
	}
	return nil
}

type raftlockSession struct{ t *raftlockTarget }

func (s raftlockSession) Lock(ctx context.Context, key string, wait bool) (func(context.Context) error, error) {
	var w time.Duration
	if wait {
		if dl, ok := ctx.Deadline(); ok {
			w = time.Until(dl)
		} else {
			w = time.Minute
		}
	}
	g, err := s.t.calls.AcquireWith(ctx, client.AcquireRequest{Key: key, Lease: s.t.lease, Wait: w})
	if err != nil {
		if !errors.Is(err, client.ErrHeld) {
			// Cut off by the run's end, or lost with the connection:
			// the grant may have applied all the same.
			s.t.ledger.doubt(key)
		}
		return nil, err
	}
	s.t.ledger.took(key, g.Token)
	return func(ctx context.Context) error {
		err := s.t.calls.ReleaseTagged(ctx, key, g.Token, 0)
		if err == nil || errors.Is(err, client.ErrNotFound) {
			s.t.ledger.released(key, g.Token)
		}
		return err
	}, nil
}

func (s raftlockSession) Read(ctx context.Context, key string) error {
	_, err := s.t.calls.Get(ctx, key)
	return err
}

func (s raftlockSession) Close() error { return nil }

// scrapeWith is scrape through hc, which may speak HTTPS.
func scrapeWith(ctx context.Context, hc *http.Client, url string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	all, err := promtext.Parse(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, n := range names {
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return out, nil
}

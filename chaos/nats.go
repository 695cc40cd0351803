package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/internal/procgroup"
)

// natsPeer is three nats-server processes in one cluster with JetStream,
// and a key-value bucket replicated on all three, as a chaos target
// (--target nats). Each server dials its routes to the others through a
// byte-stream Proxy per directed link, so a partition cuts exactly the
// links between its sides; each advertises a cluster address nothing
// listens on, so a server that learns of another through gossip cannot
// route around a cut link. Clients dial the servers' client ports
// directly.
type natsPeer struct {
	peerServers[*natsMember]

	bin   string
	sync  NatsSync
	ttl   time.Duration // the bucket's MaxAge: every hold's lease
	links map[[2]int]*Proxy
	admin *nats.Conn
}

// natsMember is one nats-server process and its addresses.
type natsMember struct {
	peerProc
	client, cluster string // real client and route listen addresses
}

// NatsSync is when the NATS servers fsync JetStream's files (chaos
// --nats-sync): at the server's default interval (two minutes), or
// after every write (sync_interval: always).
type NatsSync string

// The --nats-sync settings.
const (
	NatsSyncDefault NatsSync = "default"
	NatsSyncAlways  NatsSync = "always"
)

// The bucket the locks live in, and the stream that holds it.
const (
	natsBucket  = "locks"
	natsStream  = "KV_" + natsBucket
	natsMembers = 3
)

func newNatsPeer(dir string, seed uint64, bin string, sync NatsSync, ttl time.Duration) *natsPeer {
	if sync == "" {
		sync = NatsSyncDefault
	}
	return &natsPeer{peerServers: peerServers[*natsMember]{dir: dir, seed: seed}, bin: bin, sync: sync, ttl: ttl, links: map[[2]int]*Proxy{}}
}

// natsConfig is server id's configuration file: its name, client port,
// JetStream on its data directory, and its routes (one per other
// server, through that link's proxy).
func natsConfig(id int, client, cluster, advertise, storeDir string, routes []string, sync NatsSync) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: n%d\nlisten: %q\n", id, client)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  max_memory_store: 64MB\n  max_file_store: 1GB\n", storeDir)
	if sync == NatsSyncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "cluster {\n  name: chaos\n  listen: %q\n  advertise: %q\n  no_advertise: true\n  routes: [\n", cluster, advertise)
	for _, r := range routes {
		fmt.Fprintf(&b, "    %q\n", "nats-route://"+r)
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// Start picks addresses, starts the links and the servers (after asking
// the binary to check its configuration, so a server that lacks a
// setting says so at once), waits for JetStream, then creates the bucket.
func (n *natsPeer) Start(ctx context.Context) error {
	bin := n.bin
	if bin == "" {
		bin = "nats-server"
	}
	bin, err := exec.LookPath(bin)
	if err != nil {
		return fmt.Errorf("nats-server not found (make peers installs Debian's on PATH, and builds one with sync_interval in bin/peers): %w", err)
	}
	// Gossip names a server by its advertised cluster address: an
	// address drawn and never listened on refuses every route dialled
	// to it, so the only routes are the ones through the proxies.
	nowhere, err := n.ports.Addr()
	if err != nil {
		return err
	}
	for id := 1; id <= natsMembers; id++ {
		m := &natsMember{peerProc: peerProc{id: id}}
		for _, a := range []*string{&m.client, &m.cluster} {
			if *a, err = n.ports.Addr(); err != nil {
				return err
			}
		}
		n.members = append(n.members, m)
	}
	for _, m := range n.members {
		var routes []string
		for _, to := range n.members {
			if to.id == m.id {
				continue
			}
			p, err := NewByteProxy(to.cluster, n.seed)
			if err != nil {
				return err
			}
			n.links[[2]int{m.id, to.id}] = p
			routes = append(routes, p.Addr())
		}
		conf := filepath.Join(n.dir, fmt.Sprintf("nats-%d.conf", m.id))
		text := natsConfig(m.id, m.client, m.cluster, nowhere, n.DataDir(m.id), routes, n.sync)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		if out, err := exec.CommandContext(ctx, bin, "-c", conf, "-t").CombinedOutput(); err != nil {
			return fmt.Errorf("%s refuses its configuration (--nats-sync %s needs a server with sync_interval: make peers builds one, pass --nats-server): %s", bin, n.sync, strings.TrimSpace(string(out)))
		}
		if m.proc, err = n.procs.Start(bin, []string{"-c", conf}, filepath.Join(n.dir, fmt.Sprintf("nats-%d.log", m.id))); err != nil {
			return err
		}
	}
	if n.admin, err = nats.Connect(strings.Join(natsURLs(n.Endpoints()), ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Timeout(time.Second)); err != nil {
		return fmt.Errorf("nats admin client: %w", err)
	}
	if err := procgroup.WaitUntil(ctx, "nats bucket", n.createBucket); err != nil {
		return err
	}
	return n.WaitReady(ctx)
}

// bucketConfig is the stream behind the bucket: what nats.go's
// CreateKeyValue makes for a bucket of history 1, ttl and three
// replicas, except that direct gets are off, so a read goes to the
// stream's leader (a direct get may be served by any replica, however
// far behind).
func bucketConfig(ttl time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: natsStream, Subjects: []string{"$KV." + natsBucket + ".>"}, MaxMsgsPerSubject: 1, MaxBytes: -1, MaxAge: ttl,
		MaxMsgSize: -1, Storage: jetstream.FileStorage, Replicas: natsMembers, AllowRollup: true, DenyDelete: true,
		Duplicates: min(ttl, 2*time.Minute), MaxMsgs: -1, MaxConsumers: -1, Discard: jetstream.DiscardNew,
	}
}

// createBucket creates the bucket's stream, once JetStream's meta
// group has a leader (until then the call fails, and is retried).
func (n *natsPeer) createBucket(ctx context.Context) error {
	js, err := jetstream.New(n.admin)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.CreateOrUpdateStream(cctx, bucketConfig(n.ttl))
	return err
}

// natsURLs are the nats:// URLs of host:port addresses.
func natsURLs(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = "nats://" + a
	}
	return out
}

func (n *natsPeer) IDs() []int { return []int{1, 2, 3} }

// DataDir is server id's JetStream store_dir.
func (n *natsPeer) DataDir(id int) string { return filepath.Join(n.dir, fmt.Sprintf("nats-%d", id)) }

// Leader is the server that leads the bucket's stream.
func (n *natsPeer) Leader(ctx context.Context) int {
	js, err := jetstream.New(n.admin)
	if err != nil {
		return 0
	}
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	s, err := js.Stream(cctx, natsStream)
	if err != nil {
		return 0
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return 0
	}
	var id int
	if _, err := fmt.Sscanf(info.Cluster.Leader, "n%d", &id); err != nil {
		return 0
	}
	return id
}

// Draw draws a kill or pause, or a partition (drawClusterFault: a route
// carries both directions).
func (n *natsPeer) Draw(ctx context.Context, rng *rand.Rand, family fault.Family) fault.Fault {
	return drawClusterFault(rng, family, fault.Fixed{IDs: n.IDs(), Lead: n.Leader(ctx)})
}

// SetLinks cuts the links between servers connected says may not talk,
// both ways: a route carries messages both ways.
func (n *natsPeer) SetLinks(connected func(i, j int) bool) { cutBothWays(n.links, connected) }

// WaitReady waits until a write to the bucket succeeds, creating the
// bucket's stream if it is gone (as the clients do).
func (n *natsPeer) WaitReady(ctx context.Context) error {
	return procgroup.WaitUntil(ctx, "nats", func(ctx context.Context) error {
		if err := n.createBucket(ctx); err != nil {
			return err
		}
		js, err := jetstream.New(n.admin)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		kv, err := js.KeyValue(cctx, natsBucket)
		if err != nil {
			return err
		}
		_, err = kv.PutString(cctx, "probe", "ready")
		return err
	})
}

func (n *natsPeer) Endpoints() []string { return clientAddrs(n.members) }

func (m *natsMember) clientAddr() string { return m.client }

// Crashes are servers that exited without being killed.
func (n *natsPeer) Crashes() []Crash { return crashesOf(n.members) }

func (n *natsPeer) Notes() []string { return []string{natsSemantics} }

// PauseMin outlives any lease: every hold's lease is the bucket's MaxAge.
func (n *natsPeer) PauseMin(time.Duration) time.Duration {
	return n.ttl + natsExpiryLag + clientPauseMargin
}

func (n *natsPeer) Close() {
	if n.admin != nil {
		n.admin.Close()
	}
	n.procs.Stop()
	for _, p := range n.links {
		p.Close()
	}
}

// errNoNats is a nats client without endpoints.
var errNoNats = errors.New("nats: no server addresses")

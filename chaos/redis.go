package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/internal/procgroup"
	"github.com/raftlock/raftlock/internal/resp"
)

// redisPeer is Redis as users run it for failover (the redis-server on
// PATH: Debian's 7.0): a primary (member 1 at the start), a replica
// (member 2) and three Sentinels (quorum 2) that promote the replica when
// the primary is down. The Sentinels and the replica reach each data
// member through its byte-stream Proxy, which a partition cuts; clients
// ask a Sentinel for the primary and connect to it directly, so a client
// already connected to a primary that is cut off keeps writing to it.
// The kill, pause and partition families aim at the current primary.
type redisPeer struct {
	peerServers[*redisMember] // members: the primary and the replica

	sentinels []*redisMember
	fsync     RedisFsync // the data members' appendfsync
	mu        sync.Mutex
	isolated  int // the member a partition cuts off; 0: none
}

// redisMember is one redis-server or Sentinel process.
type redisMember struct {
	peerProc
	addr  string // real listen address
	proxy *Proxy // data members: the address Sentinels and replicas use
}

// Sentinel's timing: a primary silent for downAfter is down, and a
// failover is retried after failoverTimeout.
const (
	redisDownAfter       = 1000
	redisFailoverTimeout = 3000
)

// RedisFsync is when Redis fsyncs its append-only file (chaos
// --redis-fsync): every second (everysec, Redis's default) or before it
// answers each write (always).
type RedisFsync string

// The --redis-fsync settings.
const (
	RedisFsyncEverysec RedisFsync = "everysec"
	RedisFsyncAlways   RedisFsync = "always"
)

func newRedisPeer(dir string, seed uint64, fsync RedisFsync) *redisPeer {
	if fsync == "" {
		fsync = RedisFsyncEverysec
	}
	return &redisPeer{peerServers: peerServers[*redisMember]{dir: dir, seed: seed}, fsync: fsync}
}

// Start starts the primary and the replica, then the Sentinels, and
// waits until the Sentinels agree on the primary and know the replica.
func (r *redisPeer) Start(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("redis-server not found on PATH (make peers installs it)")
	}
	for id := 1; id <= 2; id++ {
		m := &redisMember{peerProc: peerProc{id: id}}
		if m.addr, err = r.ports.Addr(); err != nil {
			return err
		}
		if m.proxy, err = NewByteProxy(m.addr, r.seed); err != nil {
			return err
		}
		r.members = append(r.members, m)
	}
	for _, m := range r.members {
		dir := r.DataDir(m.id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		_, pport, _ := net.SplitHostPort(m.proxy.Addr())
		args := []string{"--port", port(m.addr), "--bind", "127.0.0.1", "--dir", dir, "--appendonly", "yes", "--appendfsync", string(r.fsync),
			"--save", "", "--protected-mode", "no", "--loglevel", "notice", "--replica-announce-ip", "127.0.0.1", "--replica-announce-port", pport}
		if m.id == 2 {
			args = append(args, "--replicaof", "127.0.0.1", port(r.members[0].proxy.Addr()))
		}
		if m.proc, err = r.procs.Start(bin, args, dir+".log"); err != nil {
			return err
		}
	}
	for i := 0; i < 3; i++ {
		if err := r.startSentinel(bin, i+1); err != nil {
			return err
		}
	}
	return procgroup.WaitUntil(ctx, "redis sentinels", r.sentinelsReady)
}

// port is the port of a host:port address.
func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// startSentinel writes Sentinel n's configuration (Sentinel rewrites it
// as it learns) and starts it.
func (r *redisPeer) startSentinel(bin string, n int) error {
	addr, err := r.ports.Addr()
	if err != nil {
		return err
	}
	conf := filepath.Join(r.dir, fmt.Sprintf("sentinel-%d.conf", n))
	text := fmt.Sprintf("port %s\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %s 2\nsentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s %d\nsentinel parallel-syncs %s 1\n",
		port(addr), r.dir, redisMaster, port(r.members[0].proxy.Addr()), redisMaster, redisDownAfter, redisMaster, redisFailoverTimeout, redisMaster)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return err
	}
	m := &redisMember{peerProc: peerProc{id: 2 + n}, addr: addr}
	if m.proc, err = r.procs.Start(bin, []string{conf, "--sentinel"}, filepath.Join(r.dir, fmt.Sprintf("sentinel-%d.log", n))); err != nil {
		return err
	}
	r.sentinels = append(r.sentinels, m)
	return nil
}

// sentinelsReady: the replica finished its first sync (else the first
// failover would promote an empty replica: Redis delays a diskless
// sync 5 s), and every Sentinel names a primary, knows a replica and
// its peers (ckquorum).
func (r *redisPeer) sentinelsReady(ctx context.Context) error {
	c, err := resp.Dial(ctx, r.members[1].addr)
	if err != nil {
		return err
	}
	info, err := c.Do("INFO", "replication")
	c.Close()
	if err != nil || !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("the replica has not synced yet: %v", err)
	}
	for _, s := range r.sentinels {
		c, err := resp.Dial(ctx, s.addr)
		if err != nil {
			return err
		}
		_, err = c.Call(ctx, "SENTINEL", "ckquorum", redisMaster)
		if err == nil {
			var v any
			v, err = c.Call(ctx, "SENTINEL", "replicas", redisMaster)
			if a, ok := v.([]any); err == nil && (!ok || len(a) == 0) {
				err = fmt.Errorf("sentinel %s knows no replica yet", s.addr)
			}
		}
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *redisPeer) IDs() []int { return []int{1, 2} }

// DataDir is data member id's --dir: its append-only file. The
// Sentinels' rewritten configurations are beside it, on the plain disk:
// the power families cut the data members only, and the Sentinels stay
// up through them.
func (r *redisPeer) DataDir(id int) string { return filepath.Join(r.dir, fmt.Sprintf("redis-%d", id)) }

// Leader is the primary a Sentinel names.
func (r *redisPeer) Leader(ctx context.Context) int {
	for _, s := range r.sentinels {
		addr, err := askMaster(ctx, s.addr)
		if err != nil {
			continue
		}
		for _, m := range r.members {
			if m.proxy.Addr() == addr {
				return m.id
			}
		}
	}
	return 0
}

// Draw aims every family at the primary the Sentinels name: a kill, a
// pause, or a partition cutting it off from the replica and the
// Sentinels (its clients keep their connections).
func (r *redisPeer) Draw(ctx context.Context, _ *rand.Rand, family fault.Family) fault.Fault {
	p := r.Leader(ctx)
	if p == 0 {
		p = 1
	}
	switch family {
	case fault.FamilyKill:
		return fault.Kill{Nodes: []int{p}}
	case fault.FamilyPause:
		return fault.Pause{Nodes: []int{p}}
	}
	r.mu.Lock()
	r.isolated = p
	r.mu.Unlock()
	return fault.Isolate(fault.Fixed{IDs: r.IDs(), Lead: p}, p)
}

// SetLinks cuts the member a partition isolates off from the replica and
// the Sentinels (its proxy), or heals.
func (r *redisPeer) SetLinks(connected func(i, j int) bool) {
	r.mu.Lock()
	iso := r.isolated
	r.mu.Unlock()
	all := connected(1, 2) && connected(2, 1)
	for _, m := range r.members {
		m.proxy.SetBlocked(!all && m.id == iso)
	}
}

// WaitReady waits until the primary a Sentinel names takes a write.
func (r *redisPeer) WaitReady(ctx context.Context) error {
	return procgroup.WaitUntil(ctx, "redis", func(ctx context.Context) error {
		lc, _ := dialRedis(r.Endpoints())
		defer lc.Close()
		_, err := lc.(*redisLocks).call(ctx, "SET", "probe", "ready")
		return err
	})
}

// Endpoints are the Sentinels' addresses.
func (r *redisPeer) Endpoints() []string { return clientAddrs(r.sentinels) }

func (m *redisMember) clientAddr() string { return m.addr }

// Crashes are processes that exited without being killed.
func (r *redisPeer) Crashes() []Crash { return crashesOf(r.members, r.sentinels) }

func (r *redisPeer) Notes() []string { return []string{redisSemantics} }

// PauseMin outlives a lease of max: Redis expires a key on its first
// access past its PX.
func (r *redisPeer) PauseMin(max time.Duration) time.Duration { return max + clientPauseMargin }

func (r *redisPeer) Close() {
	r.procs.Stop()
	for _, m := range r.members {
		if m.proxy != nil {
			m.proxy.Close()
		}
	}
}

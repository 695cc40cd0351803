package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/internal/procgroup"
)

// etcdPeer is three etcd members (the etcd on PATH: Debian's 3.4) as a
// chaos target. Each member advertises an HTTPGateway as its peer
// address, which routes every peer connection by the sender rafthttp
// names (X-Server-From) to that directed link's byte-stream Proxy, so a
// partition cuts exactly the links between its sides. Clients dial the
// members' client ports directly.
type etcdPeer struct {
	peerServers[*etcdMember]

	links   map[[2]int]*Proxy // directed link (from, to)
	admin   *clientv3.Client  // the harness's own client: leader, readiness
	mu      sync.Mutex        // guards senders
	senders map[string]int    // rafthttp's member id (hex) -> member
}

// etcdMember is one etcd process and its addresses.
type etcdMember struct {
	peerProc
	client, peer string // real client and peer listen addresses
	gateway      *HTTPGateway
}

// etcdMembers is how many members the harness runs.
const etcdMembers = 3

func newEtcdPeer(dir string, seed uint64) *etcdPeer {
	return &etcdPeer{
		peerServers: peerServers[*etcdMember]{dir: dir, seed: seed, procs: procgroup.Group{Env: []string{"GOMAXPROCS=1"}}},
		links:       map[[2]int]*Proxy{}, senders: map[string]int{},
	}
}

// Start picks addresses, starts the gateways, links and members, waits
// for a write to succeed, then learns the member ids and drops the
// connections made before, so every peer stream runs on its link.
func (e *etcdPeer) Start(ctx context.Context) error {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return errors.New("etcd not found on PATH (make peers installs it)")
	}
	for id := 1; id <= etcdMembers; id++ {
		m := &etcdMember{peerProc: peerProc{id: id}}
		for _, a := range []*string{&m.client, &m.peer} {
			if *a, err = e.ports.Addr(); err != nil {
				return err
			}
		}
		to := id
		if m.gateway, err = NewHTTPGateway(m.peer, "X-Server-From", func(c net.Conn, sender string) *Proxy { return e.link(c, sender, to) }); err != nil {
			return err
		}
		e.members = append(e.members, m)
	}
	var initial []string
	for _, m := range e.members {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", m.id, m.gateway.Addr()))
		for _, from := range e.members {
			if from.id != m.id {
				e.links[[2]int{from.id, m.id}] = newByteLink(m.peer, e.seed)
			}
		}
	}
	for _, m := range e.members {
		args := []string{"--name", fmt.Sprintf("m%d", m.id), "--data-dir", e.DataDir(m.id),
			"--listen-client-urls", "http://" + m.client, "--advertise-client-urls", "http://" + m.client,
			"--listen-peer-urls", "http://" + m.peer, "--initial-advertise-peer-urls", "http://" + m.gateway.Addr(),
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "raftlock-chaos", "--heartbeat-interval", "50", "--election-timeout", "500",
			"--logger", "zap", "--log-level", "warn"}
		if m.proc, err = e.procs.Start(bin, args, filepath.Join(e.dir, fmt.Sprintf("etcd-%d.log", m.id))); err != nil {
			return err
		}
	}
	if e.admin, err = clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()}); err != nil {
		return err
	}
	if err := e.WaitReady(ctx); err != nil {
		return err
	}
	return e.learnSenders(ctx)
}

// learnSenders maps each member's id to its number, then drops the
// connections the gateways carried unrouted.
func (e *etcdPeer) learnSenders(ctx context.Context) error {
	resp, err := e.admin.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("etcd member list: %w", err)
	}
	e.mu.Lock()
	for _, m := range resp.Members {
		var id int
		if _, err := fmt.Sscanf(m.Name, "m%d", &id); err == nil {
			e.senders[hexID(m.ID)] = id
		}
	}
	n := len(e.senders)
	e.mu.Unlock()
	if n != etcdMembers {
		return fmt.Errorf("etcd member list names %d of %d members", n, etcdMembers)
	}
	for _, m := range e.members {
		m.gateway.Drop()
	}
	return nil
}

// link is the Proxy of the link from sender (or, for a request that
// names none, such as a lease renewal a member forwards to the leader,
// the member holding c's other end) to member to; nil while the sender
// is not known.
func (e *etcdPeer) link(c net.Conn, sender string, to int) *Proxy {
	e.mu.Lock()
	from, ok := e.senders[sender]
	n := len(e.senders)
	e.mu.Unlock()
	if !ok && n == etcdMembers {
		pids := map[int]int{}
		for _, m := range e.members {
			if pid := m.proc.PID(); pid != 0 {
				pids[pid] = m.id
			}
		}
		from = socketOwner(c.RemoteAddr(), pids)
	}
	if from == 0 || from == to {
		return nil
	}
	return e.links[[2]int{from, to}]
}

func (e *etcdPeer) IDs() []int { return []int{1, 2, 3} }

// DataDir is member id's --data-dir.
func (e *etcdPeer) DataDir(id int) string { return filepath.Join(e.dir, fmt.Sprintf("etcd-%d", id)) }

// Leader asks each member's status for the leader it knows.
func (e *etcdPeer) Leader(ctx context.Context) int {
	for _, m := range e.members {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		st, err := e.admin.Status(cctx, m.client)
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		e.mu.Lock()
		id := e.senders[hexID(st.Leader)]
		e.mu.Unlock()
		if id != 0 {
			return id
		}
	}
	return 0
}

// Draw draws a kill or pause of members, or a partition (drawClusterFault:
// an etcd peer connection carries both directions).
func (e *etcdPeer) Draw(ctx context.Context, rng *rand.Rand, family fault.Family) fault.Fault {
	return drawClusterFault(rng, family, fault.Fixed{IDs: e.IDs(), Lead: e.Leader(ctx)})
}

// SetLinks cuts the links between members connected says may not talk,
// both ways: an etcd peer connection carries messages both ways (a
// stream's dialler reads what the other sends).
func (e *etcdPeer) SetLinks(connected func(i, j int) bool) { cutBothWays(e.links, connected) }

// drawClusterFault draws a kill or pause of members of a target whose
// members form one cluster as raftlock's are drawn (one, the leader, a
// minority or a majority), or a partition; a one-way cut is not drawn:
// its links carry both directions.
func drawClusterFault(rng *rand.Rand, family fault.Family, c fault.Fixed) fault.Fault {
	switch family {
	case fault.FamilyKill:
		return fault.DrawKill(rng, c)
	case fault.FamilyPause:
		return fault.DrawPause(rng, c)
	}
	return fault.DrawPartition(rng, c)
}

// cutBothWays blocks each directed link of links whose two ends
// connected says may not talk, in either direction.
func cutBothWays(links map[[2]int]*Proxy, connected func(i, j int) bool) {
	for l, p := range links {
		p.SetBlocked(!connected(l[0], l[1]) || !connected(l[1], l[0]))
	}
}

// WaitReady waits until a write succeeds.
func (e *etcdPeer) WaitReady(ctx context.Context) error {
	return procgroup.WaitUntil(ctx, "etcd", func(ctx context.Context) error {
		_, err := e.admin.Put(ctx, "/chaos/probe", "ready")
		return err
	})
}

func (e *etcdPeer) Endpoints() []string { return clientAddrs(e.members) }

func (m *etcdMember) clientAddr() string { return m.client }

// Crashes are members that exited without being killed.
func (e *etcdPeer) Crashes() []Crash { return crashesOf(e.members) }

func (e *etcdPeer) Notes() []string { return []string{etcdSemantics} }

// PauseMin is a pause that outlives any lease of at most max: etcd's
// whole-second TTL, the half second between its leader's expiry checks,
// and the harness's margin.
func (e *etcdPeer) PauseMin(max time.Duration) time.Duration {
	return time.Duration(etcdTTL(max))*time.Second + 500*time.Millisecond + clientPauseMargin
}

func (e *etcdPeer) Close() {
	if e.admin != nil {
		e.admin.Close()
	}
	e.procs.Stop()
	for _, m := range e.members {
		m.gateway.Close()
	}
	for _, p := range e.links {
		p.Close()
	}
}

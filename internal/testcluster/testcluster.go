// Package testcluster runs a raftlock cluster inside one process, over real
// loopback TCP and real pebble directories, for tests and smoke benchmarks.
package testcluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/node"
)

// Cluster is a set of in-process members with client servers.
type Cluster struct {
	Dir     string
	Peers   map[uint64]string
	Clients map[uint64]string // client API addresses
	tune    func(*node.Config)

	mu      sync.Mutex
	members map[uint64]*member
}

type member struct {
	node   *node.Node
	server *node.Server
}

// Start runs size members in dir. tune, if not nil, adjusts each config.
func Start(dir string, size int, tune func(*node.Config)) (*Cluster, error) {
	c := &Cluster{Dir: dir, Peers: map[uint64]string{}, Clients: map[uint64]string{},
		members: map[uint64]*member{}, tune: tune}
	for id := uint64(1); id <= uint64(size); id++ {
		var err error
		if c.Peers[id], err = freeport.Addr(); err != nil {
			return nil, err
		}
		if c.Clients[id], err = freeport.Addr(); err != nil {
			return nil, err
		}
	}
	for id := range c.Peers {
		if err := c.StartMember(id); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// StartMember (re)starts member id from its data directory.
func (c *Cluster) StartMember(id uint64) error {
	ln, err := net.Listen("tcp", c.Clients[id])
	if err != nil {
		return fmt.Errorf("member %d: %w", id, err)
	}
	cfg := node.Config{ID: id, Peers: c.Peers, ClientAddr: c.Clients[id],
		DataDir: filepath.Join(c.Dir, strconv.FormatUint(id, 10)),
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	if c.tune != nil {
		c.tune(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	if err := n.Start(); err != nil {
		ln.Close()
		return err
	}
	m := &member{node: n, server: node.NewServer(n)}
	go m.server.Serve(ln)
	c.mu.Lock()
	c.members[id] = m
	c.mu.Unlock()
	return nil
}

// StopMember stops member id abruptly.
func (c *Cluster) StopMember(id uint64) {
	c.mu.Lock()
	m := c.members[id]
	delete(c.members, id)
	c.mu.Unlock()
	if m != nil {
		m.server.Close()
		m.node.Close()
	}
}

// Node returns member id, or nil when it is stopped.
func (c *Cluster) Node(id uint64) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.members[id]; m != nil {
		return m.node
	}
	return nil
}

// Endpoints lists the client addresses in id order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, 0, len(c.Clients))
	for id := uint64(1); id <= uint64(len(c.Clients)); id++ {
		eps = append(eps, c.Clients[id])
	}
	return eps
}

// Leader waits until some member can make lock decisions and returns its id.
func (c *Cluster) Leader(ctx context.Context) (uint64, error) {
	for {
		c.mu.Lock()
		for id, m := range c.members {
			st := m.node.Status()
			if st.Role == "leader" {
				if _, err := m.node.Get(ctx, "probe", false); err == nil {
					c.mu.Unlock()
					return id, nil
				}
			}
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no ready leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Close stops every member.
func (c *Cluster) Close() {
	c.mu.Lock()
	ids := make([]uint64, 0, len(c.members))
	for id := range c.members {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.StopMember(id)
	}
}

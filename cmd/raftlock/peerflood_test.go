package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/tlsconfig"
)

// Issue 37, finding 1: idle TCP connections to the peer ports, no
// certificate needed, used to take every inbound peer slot, so after the
// leader died the others stayed pre-candidate as long as the flood
// lasted. With 40 idle connections held on each member's peer port, a
// killed leader is replaced in under 5 s, without TLS and with it.
func TestPeerFloodDoesNotStopElections(t *testing.T) {
	startsProcesses(t)
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			var c *processCluster
			var opts client.Options
			if secure {
				tc := newTLSCluster(t, "")
				c = tc.processCluster
				r, err := tlsconfig.Load(tlsconfig.Files{
					Cert: filepath.Join(tc.certs, "client-admin.pem"),
					Key:  filepath.Join(tc.certs, "client-admin-key.pem"),
					CA:   filepath.Join(tc.certs, "ca.pem"),
				})
				if err != nil {
					t.Fatal(err)
				}
				opts.TLS = r.ClientConfig()
			} else {
				c = newProcessCluster(t, 3, "--log-level", "info")
			}
			cl, err := client.New(c.endpoints(), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()

			leader, term := electedLeader(ctx, t, cl, c, 0)
			held := make([]*idleFlood, len(c.members))
			for i, m := range c.members {
				held[i] = holdIdle(t, m.peer, 40)
			}
			waitUntil(ctx, t, "40 idle connections held on every peer port", func() bool {
				for _, f := range held {
					if f.open.Load() < 40 {
						return false
					}
				}
				return true
			})
			c.kill(leader)
			killed := time.Now()
			next, _ := electedLeader(ctx, t, cl, c, term)
			if took := time.Since(killed); took >= 5*time.Second {
				t.Fatalf("member %d took over from killed member %d after %s under the flood, want under 5s\n%s", next.id, leader.id, took.Round(time.Millisecond), c.logs())
			} else {
				t.Logf("member %d took over from killed member %d after %s, %d idle connections held per peer port", next.id, leader.id, took.Round(time.Millisecond), 40)
			}
			for i, f := range held {
				if c.members[i] != leader {
					t.Logf("peer port of member %d: %d idle connections opened in all", c.members[i].id, f.dials.Load())
				}
			}
		})
	}
}

// electedLeader polls the running members' status until one of them
// leads in a term after term and every running member agrees, and returns
// it with its term.
func electedLeader(ctx context.Context, t *testing.T, cl *client.Client, c *processCluster, term uint64) (*processMember, uint64) {
	t.Helper()
	var leader *processMember
	var leaderTerm uint64
	waitUntil(ctx, t, fmt.Sprintf("a leader in a term after %d", term), func() bool {
		leader = nil
		var votes []uint64
		for _, m := range c.members {
			if m.cmd == nil {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			st, err := cl.Status(sctx, m.client)
			cancel()
			if err != nil {
				return false
			}
			votes = append(votes, st.Leader)
			if st.Role == "leader" && st.Term > term {
				leader, leaderTerm = m, st.Term
			}
		}
		if leader == nil {
			return false
		}
		for _, v := range votes {
			if v != uint64(leader.id) {
				return false
			}
		}
		return true
	})
	return leader, leaderTerm
}

// idleFlood is a set of idle TCP connections held to one address.
type idleFlood struct {
	open  atomic.Int64 // connections open now
	dials atomic.Int64 // connections opened in all
}

// holdIdle holds n idle TCP connections to addr until the test ends: each
// sends nothing, and one the member closes is dialled again 10 ms later,
// as someone without a certificate who wants the port full would.
func holdIdle(t *testing.T, addr string, n int) *idleFlood {
	t.Helper()
	f := &idleFlood{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					f.open.Add(1)
					f.dials.Add(1)
					done := make(chan struct{})
					go func() {
						select {
						case <-stop:
						case <-done:
						}
						c.Close()
					}()
					var b [1]byte
					c.Read(b[:]) // until the member, or stop, closes it
					close(done)
					f.open.Add(-1)
				}
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	return f
}

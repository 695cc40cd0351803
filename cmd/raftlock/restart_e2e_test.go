package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/nodetest"
)

// Issue 8's end-to-end proof: real member processes that snapshot every 50
// entries, under load from `raftlock bench --endpoints`, are each killed
// with SIGKILL and restarted in turn, three rounds over. Every member must
// come back (a member that snapshotted used to panic on every start), the
// cluster must converge on one digest, and locks taken with a one-hour lease
// before the kills must still be held with their tokens.
func TestEveryMemberSurvivesKill9WithSnapshotsUnderLoad(t *testing.T) {
	startsProcesses(t)
	c, ctx, cl := readyProcessClusterWith(t, 4*time.Minute, "--snapshot-every", "50", "--snapshot-keep", "20", "--log-level", "warn")
	held := holdLocks(ctx, t, cl, "held-0", "held-1", "held-2")

	// Load for the whole test, through every kill and restart (it sees
	// errors while members restart; it only has to keep the log moving).
	loadLog := filepath.Join(c.dir, "bench.log")
	load, loadDone := spawn(t, c.bin, loadLog, []string{"bench", "--endpoints", strings.Join(c.endpoints(), ","),
		"--clients", "8", "--workload", "uncontended", "--warmup", "0s", "--duration", "10m", "--lease", "2s",
		"--out", filepath.Join(c.dir, "bench")})
	defer func() {
		load.Process.Signal(os.Interrupt)
		<-loadDone
	}()
	for round := 1; round <= 3; round++ {
		for _, m := range c.members {
			before, _ := m.metric(ctx, "raftlock_snapshots_total")
			waitUntil(ctx, t, fmt.Sprintf("member %d to take a snapshot under load (round %d)", m.id, round), func() bool {
				select {
				case <-loadDone:
					out, _ := os.ReadFile(loadLog)
					t.Fatalf("the bench load stopped:\n%s", out)
				default:
				}
				v, err := m.metric(ctx, "raftlock_snapshots_total")
				return err == nil && v > before
			})
			c.kill(m)
			c.start(m)
			waitUntil(ctx, t, fmt.Sprintf("member %d to serve again after restart (round %d)", m.id, round), func() bool {
				if !m.running() {
					t.Fatalf("member %d exited after its restart in round %d:\n%s", m.id, round, c.log(m))
				}
				_, err := m.metric(ctx, "raftlock_applied_index")
				return err == nil
			})
		}
	}

	// All members up, one leader, one applied index and one digest.
	waitUntil(ctx, t, "one leader and equal digests at equal applied indexes", func() bool {
		leaders := 0
		var applied uint64
		var digest string
		for i, m := range c.members {
			if !m.running() {
				t.Fatalf("member %d is not running:\n%s", m.id, c.log(m))
			}
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Status(sctx, m.client)
			scancel()
			if err != nil {
				return false
			}
			if st.Role == "leader" {
				leaders++
			}
			if i == 0 {
				applied, digest = st.Applied, st.Digest
			} else if st.Applied != applied || st.Digest != digest {
				return false
			}
		}
		return leaders == 1
	})
	for key, token := range held {
		info, err := cl.Get(ctx, key)
		if err != nil || !info.Held || info.Token != token {
			t.Fatalf("%s after three rounds of kills: %+v, %v; want held with token %d", key, info, err, token)
		}
	}
	var installs float64
	for _, m := range c.members {
		v, _ := m.metric(ctx, "raftlock_snapshots_installed_total")
		installs += v
	}
	t.Logf("snapshots installed by the final incarnations: %v", installs)
}

// A second member started on a data directory in use says so plainly.
func TestSecondMemberOnSameDataDirectoryRefused(t *testing.T) {
	startsProcesses(t)
	c := newProcessCluster(t, 1, "--log-level", "warn")
	m := c.members[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitUntil(ctx, t, "the member to serve", func() bool {
		_, err := m.metric(ctx, "raftlock_applied_index")
		return err == nil
	})
	code, stderr := refusal(t, "node", "--id", "1", "--peers", "1="+m.peer, "--listen", freeport.For(t), "--data", c.dataDir(1))
	if code == 0 || !strings.Contains(stderr, "in use by another process") {
		t.Fatalf("second member on the same data directory: exit %d\n%s", code, stderr)
	}
}

// Members listening on every interface give out the addresses they
// advertise: redirects and status name --advertise-client, and peers dial
// the --peers address while the member listens on --peer-listen.
func TestMembersListeningOnAllInterfacesAdvertiseReachableAddresses(t *testing.T) {
	startsProcesses(t)
	port := func(addr string) string { _, p, _ := strings.Cut(addr, ":"); return p }
	c := newProcessClusterWith(t, 3, func(m *processMember) []string {
		return []string{"--listen", "0.0.0.0:" + port(m.client), "--advertise-client", m.client,
			"--peer-listen", "0.0.0.0:" + port(m.peer)}
	}, "--log-level", "warn", "--insecure") // all interfaces without certificates: --insecure says so
	cl := nodetest.Client(t, c.endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitUntil(ctx, t, "a leader that follower redirects name by its advertised address", func() bool {
		for _, m := range c.members {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Status(sctx, m.client)
			scancel()
			if err != nil || st.Addr != m.client {
				return false
			}
			if st.Role == "follower" && st.LeaderAddr != "" {
				for _, l := range c.members {
					if l.id == int(st.Leader) && st.LeaderAddr != l.client {
						t.Fatalf("member %d names leader %d at %s, want its advertised %s", m.id, l.id, st.LeaderAddr, l.client)
					}
				}
				return true
			}
		}
		return false
	})
	if _, err := cl.Acquire(ctx, "k", time.Minute, 0); err != nil {
		t.Fatalf("acquire through redirects: %v", err)
	}
}

// `raftlock cluster` without --data keeps its state in ./raftlock-data and
// finds it again on restart: tokens carry on instead of starting at 1.
func TestClusterReusesDefaultDataDirectory(t *testing.T) {
	startsProcesses(t)
	bin := buildBinary(t)
	work := t.TempDir()
	peer, cport, hport, aport := freePort(t), freePort(t), freePort(t), freePort(t)
	cl := nodetest.Client(t, "127.0.0.1:"+cport)
	args := []string{"--nodes", "1", "--peer-port", peer, "--client-port", cport, "--http-port", hport, "--api-port", aport}
	acquire := func(key string) uint64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return holdLocks(ctx, t, cl, key)[key]
	}

	cmd, banner := startLocalCluster(t, bin, work, args...)
	want := filepath.Join(work, embed.DefaultLocalData)
	if !strings.Contains(banner, "raftlock cluster: 1 member, data in "+want+" (new)") {
		t.Fatalf("first start does not say where its data is:\n%s", banner)
	}
	first := acquire("a")
	interrupt(cmd)
	if _, err := os.Stat(filepath.Join(want, "1")); err != nil {
		t.Fatalf("no member data in the default directory: %v", err)
	}
	cmd, banner = startLocalCluster(t, bin, work, args...)
	defer interrupt(cmd)
	if !strings.Contains(banner, "data in "+want+" (reused") {
		t.Fatalf("restart does not say it reused its data:\n%s", banner)
	}
	if second := acquire("b"); second != first+1 {
		t.Fatalf("token after restart %d, want %d (tokens must carry on)", second, first+1)
	}
}

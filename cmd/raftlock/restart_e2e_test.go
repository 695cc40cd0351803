package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/syncio"
	"github.com/raftlock/raftlock/node/embed"
)

// Issue 8's end-to-end proof: real member processes that snapshot every 50
// entries, under load from `raftlock bench --endpoints`, are each killed
// with SIGKILL and restarted in turn, three rounds over. Every member must
// come back (a member that snapshotted used to panic on every start), the
// cluster must converge on one digest, and locks taken with a one-hour lease
// before the kills must still be held with their tokens.
func TestEveryMemberSurvivesKill9WithSnapshotsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c, ctx, cl := readyProcessClusterWith(t, 4*time.Minute, "--snapshot-every", "50", "--snapshot-keep", "20", "--log-level", "warn")
	held := holdLocks(ctx, t, cl, "held-0", "held-1", "held-2")

	// Load for the whole test, through every kill and restart (it sees
	// errors while members restart; it only has to keep the log moving).
	loadOut := syncio.NewBuffer()
	load := exec.CommandContext(ctx, c.bin, "bench", "--endpoints", strings.Join(c.endpoints(), ","),
		"--clients", "8", "--workload", "uncontended", "--warmup", "0s", "--duration", "10m", "--lease", "2s",
		"--out", filepath.Join(c.dir, "bench"))
	load.Stdout, load.Stderr = loadOut, loadOut
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	loadDone := make(chan struct{})
	go func() {
		load.Wait()
		close(loadDone)
	}()
	defer func() {
		load.Process.Signal(syscall.SIGINT)
		<-loadDone
	}()
	for round := 1; round <= 3; round++ {
		for _, m := range c.members {
			before, _ := m.metric(ctx, "raftlock_snapshots_total")
			waitUntil(ctx, t, fmt.Sprintf("member %d to take a snapshot under load (round %d)", m.id, round), func() bool {
				select {
				case <-loadDone:
					t.Fatalf("the bench load stopped:\n%s", loadOut.String())
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
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := newProcessCluster(t, 1, "--log-level", "warn")
	m := c.members[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitUntil(ctx, t, "the member to serve", func() bool {
		_, err := m.metric(ctx, "raftlock_applied_index")
		return err == nil
	})
	other, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, c.bin, "node", "--id", "1", "--peers", "1="+m.peer, "--listen", other,
		"--data", filepath.Join(c.dir, "data-1")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another process") {
		t.Fatalf("second member on the same data directory: %v\n%s", err, out)
	}
}

// Members listening on every interface give out the addresses they
// advertise: redirects and status name --advertise-client, and peers dial
// the --peers address while the member listens on --peer-listen.
func TestMembersListeningOnAllInterfacesAdvertiseReachableAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	port := func(addr string) string { _, p, _ := strings.Cut(addr, ":"); return p }
	c := newProcessClusterWith(t, 3, func(m *processMember) []string {
		return []string{"--listen", "0.0.0.0:" + port(m.client), "--advertise-client", m.client,
			"--peer-listen", "0.0.0.0:" + port(m.peer)}
	}, "--log-level", "warn", "--insecure") // all interfaces without certificates: --insecure says so
	cl, err := client.New(c.endpoints(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
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
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildBinary(t)
	work := t.TempDir()
	port := func() string {
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := strings.Cut(addr, ":")
		return p
	}
	peer, cport, hport, aport := port(), port(), port(), port()
	endpoint := "127.0.0.1:" + cport
	start := func() (*exec.Cmd, string) {
		t.Helper()
		cmd := exec.Command(bin, "cluster", "--nodes", "1", "--peer-port", peer, "--client-port", cport, "--http-port", hport, "--api-port", aport)
		cmd.Dir = work
		cmd.Stderr = os.Stderr
		sc := startScanning(t, cmd, cmd.StdoutPipe)
		var banner string
		for sc.Scan() {
			banner += sc.Text() + "\n"
			if strings.HasPrefix(sc.Text(), "endpoints:") {
				break
			}
		}
		go func() {
			for sc.Scan() {
			}
		}()
		return cmd, banner
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	}
	acquire := func(key string) uint64 {
		t.Helper()
		cl, err := client.New([]string{endpoint}, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for {
			g, err := cl.Acquire(ctx, key, time.Hour, 0)
			if err == nil {
				return g.Token
			}
			if ctx.Err() != nil {
				t.Fatalf("acquire %s: %v", key, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	cmd, banner := start()
	want := filepath.Join(work, embed.DefaultLocalData)
	if !strings.Contains(banner, "raftlock cluster: 1 member, data in "+want+" (new)") {
		t.Fatalf("first start does not say where its data is:\n%s", banner)
	}
	first := acquire("a")
	stop(cmd)
	if _, err := os.Stat(filepath.Join(want, "1")); err != nil {
		t.Fatalf("no member data in the default directory: %v", err)
	}
	cmd, banner = start()
	defer stop(cmd)
	if !strings.Contains(banner, "data in "+want+" (reused") {
		t.Fatalf("restart does not say it reused its data:\n%s", banner)
	}
	if second := acquire("b"); second != first+1 {
		t.Fatalf("token after restart %d, want %d (tokens must carry on)", second, first+1)
	}
}

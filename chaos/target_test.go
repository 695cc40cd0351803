package chaos

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker"
)

// needEtcd skips a test that starts etcd processes under -short, or
// where etcd is not installed.
func needEtcd(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd processes")
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd is not installed (make peers installs it): the etcd target is not tried")
	}
}

// A short run against three etcd members reaches a verdict (valid, or
// the violations etcd earns) with its reports written, and names the
// families etcd cannot carry out.
func TestEtcdTargetRunReachesAVerdict(t *testing.T) {
	needEtcd(t)
	cfg := Defaults()
	cfg.Target, cfg.Seed, cfg.Time, cfg.Out = TargetEtcd, 301, 10*time.Second, t.TempDir()
	cfg.Nemeses = []fault.Family{fault.FamilyKill, fault.FamilyPause, fault.FamilyPartition, fault.FamilyClock}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	v, _, err := RunAndCheck(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("etcd run: %v\n%s", err, progress.String())
	}
	if v.ExitCode != checker.ExitValid && v.ExitCode != checker.ExitViolation {
		t.Fatalf("etcd run reached no verdict: %s (exit %d)\n%s", v.Verdict, v.ExitCode, progress.String())
	}
	if v.Stats.Grants == 0 {
		t.Fatalf("no lock was granted in the etcd run:\n%s", progress.String())
	}
	for _, f := range []string{"verdict.json", "summary.md", "history.jsonl"} {
		if _, err := os.Stat(filepath.Join(cfg.Out, f)); err != nil {
			t.Errorf("report %s: %v", f, err)
		}
	}
	summary := readReport(t, cfg, "summary.md")
	for _, want := range []string{"Target: etcd", "Not run: clock (etcd reads the system clock"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, summary)
		}
	}
	header, _, _ := strings.Cut(readReport(t, cfg, "history.jsonl"), "\n")
	if !strings.Contains(header, `"target":"etcd"`) || !strings.Contains(header, `"nemeses_not_run":["clock"]`) {
		t.Errorf("history header lacks the target or the family not run: %s", header)
	}
}

// A raftlock run's "Not run" line is the one it always was; a peer's
// names each family with its reason.
func TestNotRunLine(t *testing.T) {
	c := Defaults()
	c.Nemeses = []fault.Family{fault.FamilyKill, fault.FamilyClientPause}
	_, notRun := c.nemeses()
	if got, want := notRunLine(&c, notRun), "Not run: client-pause (it stops client processes, and --client-procs is 0)."; got != want {
		t.Errorf("raftlock: %q, want %q", got, want)
	}
	c.Target = TargetRedis
	c.Nemeses = []fault.Family{fault.FamilyKill, fault.FamilyNet, fault.FamilySnapshot}
	_, notRun = c.nemeses()
	got := notRunLine(&c, notRun)
	if !strings.HasPrefix(got, "Not run: net (") || !strings.Contains(got, "; snapshot (") {
		t.Errorf("redis: %q", got)
	}
}

// A peer's configuration refuses what only raftlock has.
func TestPeerTargetRefusesRaftlockSettings(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Bug = "stale-read" },
		func(c *Config) { c.Held = 10 },
		func(c *Config) { c.Nodes = 5 },
		func(c *Config) { c.Target = "zookeeper" },
		func(c *Config) { c.Protocols = []string{"binary", "http"} },
	} {
		c := Defaults()
		c.Target = TargetEtcd
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

// peekHeader reads a request's header without consuming it, and waits
// for no byte past the headers' end.
func TestPeekHeaderLeavesTheRequest(t *testing.T) {
	req := "GET /raft/stream/message/1 HTTP/1.1\r\nHost: x\r\nX-Server-From: 8e9e05c52164694d\r\n\r\n"
	a, b := net.Pipe()
	defer a.Close()
	go b.Write([]byte(req)) // and nothing more: the sender waits for an answer
	r := bufio.NewReader(a)
	if got := peekHeader(r, "X-Server-From"); got != "8e9e05c52164694d" {
		t.Fatalf("sender %q", got)
	}
	rest := make([]byte, len(req))
	if _, err := io.ReadFull(r, rest); err != nil || string(rest) != req {
		t.Fatalf("request consumed: %q, %v", rest, err)
	}
}

// A byte-stream proxy carries bytes both ways, and a cut blackholes them.
func TestByteProxyCarriesAndCuts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c) // echo
		}
	}()
	p, err := NewByteProxy(ln.Addr().String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func() error {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		_, err = io.ReadFull(c, b)
		return err
	}
	if err := echo(); err != nil {
		t.Fatalf("open link: %v", err)
	}
	p.SetBlocked(true)
	if err := echo(); err == nil {
		t.Fatal("a cut link carried bytes")
	}
	p.SetBlocked(false)
	if err := echo(); err != nil {
		t.Fatalf("healed link: %v", err)
	}
}

// A partition cuts the etcd leader off through the byte-stream links:
// the rest elect another leader, and the cut-off one takes no write.
func TestEtcdPartitionIsolatesTheLeader(t *testing.T) {
	needEtcd(t)
	e := newEtcdPeer(t.TempDir(), 1)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	old := e.Leader(ctx)
	if old == 0 {
		t.Fatal("no leader")
	}
	p := fault.Isolate(fault.Fixed{IDs: e.IDs(), Lead: old}, old)
	e.SetLinks(p.Connected)
	for {
		if l := e.Leader(ctx); l != 0 && l != old {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("member %d cut off, and no other member leads", old)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cut, err := dialEtcd([]string{e.members[old-1].client})
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cut.(*etcdLocks).cli.Put(wctx, "/chaos/cut", "x")
	wcancel()
	if err == nil {
		t.Fatalf("member %d, cut off, took a write", old)
	}
	e.SetLinks(func(int, int) bool { return true })
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/chaos/lazyfs"
)

// peerVerdict runs raftlock chaos with args into a fresh report
// directory and returns its verdict.json, failing unless the run reached
// a verdict (valid, exit 0, or the violations the target earns, exit 1)
// with its summary written.
func peerVerdict(t *testing.T, bin string, args ...string) (v struct {
	ExitCode int      `json:"exit_code"`
	Notes    []string `json:"notes"`
	Stats    struct {
		Grants       int   `json:"grants"`
		PowerCuts    int   `json:"power_cuts"`
		BytesDropped int64 `json:"power_bytes_dropped"`
	} `json:"stats"`
}, summary string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report")
	cmd := exec.Command(bin, append(append([]string{"chaos"}, args...), "--out", out)...)
	output, err := cmd.CombinedOutput()
	if code := exitCode(err); code != 0 && code != 1 {
		t.Fatalf("raftlock chaos %s: exit %d, want a verdict (0 or 1)\n%s", strings.Join(args, " "), code, output)
	}
	b, err := os.ReadFile(filepath.Join(out, "verdict.json"))
	if err != nil {
		t.Fatalf("no verdict.json: %v\n%s", err, output)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("verdict.json: %v", err)
	}
	s, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil {
		t.Fatalf("no summary.md: %v", err)
	}
	noneLeftNaming(t, out)
	return v, string(s)
}

// natsServer is the nats-server the NATS tests run: the one make peers
// builds in bin/peers (it has sync_interval), else the one on PATH;
// skipped when there is neither.
func natsServer(t *testing.T, needSync bool) string {
	t.Helper()
	if p, err := filepath.Abs("../../bin/peers/nats-server"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if needSync {
		t.Skip("no bin/peers/nats-server (make peers builds it): --nats-sync always is not tried")
	}
	p, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("nats-server is not installed (make peers installs it): the nats target is not tried")
	}
	return p
}

// A short run against three NATS servers with a replicated key-value
// bucket reaches a verdict with locks granted, under kills and
// partitions, and says how the adapter maps the calls.
func TestChaosNatsTarget(t *testing.T) {
	startsProcesses(t)
	server := natsServer(t, false)
	bin := buildBinary(t)
	v, summary := peerVerdict(t, bin, "--target", "nats", "--nats-server", server, "--seed", "7", "--duration", "10s",
		"--nemesis", "kill,partition", "--fault-interval", "2s", "--fault-duration", "1s")
	if v.Stats.Grants == 0 {
		t.Errorf("no lock was granted in the nats run")
	}
	for _, want := range []string{"Target: nats", "NATS JetStream sync: the server's default", "the fencing token is the revision"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, summary)
		}
	}
}

// The power families on peer targets: every server's data on lazyfs, cuts
// made and counted in the verdict's stats, and a verdict reached (the
// target's to earn). Skipped where lazyfs cannot mount (not root, no
// /dev/fuse) or the server is not installed.
func TestChaosPeerTargetsUnderPower(t *testing.T) {
	startsProcesses(t)
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazyfs cannot mount here: %v", err)
	}
	bin := buildBinary(t)
	faults := []string{"--seed", "3", "--fault-interval", "3s", "--fault-duration", "1s"}
	for _, tc := range []struct {
		name, server string
		args         []string
	}{
		{"etcd", "etcd", []string{"--target", "etcd", "--nemesis", "power,power-all", "--duration", "10s"}},
		{"redis-always", "redis-server", []string{"--target", "redis", "--redis-fsync", "always", "--nemesis", "power-all", "--duration", "10s"}},
		{"nats-always", "", []string{"--target", "nats", "--nats-sync", "always", "--nemesis", "power-all", "--duration", "15s", "--fault-interval", "8s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, faults...), tc.args...)
			if tc.server == "" {
				args = append(args, "--nats-server", natsServer(t, true))
			} else if _, err := exec.LookPath(tc.server); err != nil {
				t.Skipf("%s is not installed (make peers installs it)", tc.server)
			}
			v, summary := peerVerdict(t, bin, args...)
			if v.Stats.PowerCuts == 0 {
				t.Errorf("no power cut counted in the verdict's stats")
			}
			if !strings.Contains(summary, "Power: ") {
				t.Errorf("summary.md does not count the power cuts:\n%s", summary)
			}
			t.Logf("%s: exit %d, %d grants, %d cuts dropping %d bytes, notes %v", tc.name, v.ExitCode, v.Stats.Grants, v.Stats.PowerCuts, v.Stats.BytesDropped, v.Notes)
		})
	}
}

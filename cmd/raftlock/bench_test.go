package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

// heldJSON is what these tests read back of bench --held's JSON.
type heldJSON struct {
	Partial  bool     `json:"partial"`
	FillMode string   `json:"fill_mode"`
	Notes    []string `json:"notes"`
	Released *int     `json:"released"`
	Runs     []struct {
		Held    int   `json:"held"`
		KeySize int   `json:"key_size"`
		Clients int   `json:"clients"`
		Ops     int64 `json:"ops"`
		Events  *struct {
			GCCycles *float64 `json:"gc_cycles"`
		} `json:"cluster_events"`
	} `json:"runs"`
	Scale []struct {
		Held int `json:"held"`
		Fill *struct {
			Locks    int     `json:"locks"`
			RateOpsS float64 `json:"rate_acquires_s"`
		} `json:"fill"`
		IdleLeaderCPU *float64 `json:"idle_leader_cpu"`
		CatchUp       *struct {
			Seconds    float64 `json:"seconds"`
			BySnapshot bool    `json:"by_snapshot"`
		} `json:"catch_up"`
		Join *struct {
			Seconds    float64 `json:"seconds"`
			BySnapshot bool    `json:"by_snapshot"`
		} `json:"join"`
	} `json:"scale"`
}

func decodeHeld(t *testing.T, b []byte) heldJSON {
	t.Helper()
	return decodeJSON[heldJSON](t, "bench JSON", b)
}

// decodeJSON decodes b into a T; what names b in a failure.
func decodeJSON[T any](t *testing.T, what string, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, b)
	}
	return v
}

// bench --held on a cluster of its own: every point at each size with keys
// of the size asked, the fill's rate, the idle leader's CPU, a follower's
// catch-up and a member's join by snapshot, and scale.md and scale.png.
func TestBenchHeldMeasuresEachTableSize(t *testing.T) {
	startsProcesses(t)
	bin := buildBinary(t)
	out := filepath.Join(t.TempDir(), "results")
	r := runCLI(t, bin, nil, "bench", "--held", "0,200", "--key-size", "250", "--clients", "1,4", "--duration", "500ms",
		"--warmup", "100ms", "--snapshot-every", "100", "--out", out)
	if r.code != 0 {
		t.Fatalf("bench --held: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeHeld(t, b)
	if len(rep.Runs) != 4 || len(rep.Scale) != 2 || rep.FillMode != "incremental" {
		t.Fatalf("%d runs, %d sizes, fill mode %q; want 4 runs at 2 sizes, incremental\n%s", len(rep.Runs), len(rep.Scale), rep.FillMode, b)
	}
	for i, x := range rep.Runs {
		if want := []int{0, 0, 200, 200}[i]; x.Held != want || x.KeySize != 250 || x.Ops == 0 {
			t.Errorf("run %d: held %d, key size %d, %d ops; want held %d, key size 250, ops", i, x.Held, x.KeySize, x.Ops, want)
		}
		if x.Events == nil || x.Events.GCCycles == nil {
			t.Errorf("run %d: no cluster events (collections, snapshots, leader changes in the window)", i)
		}
	}
	s := rep.Scale[1]
	// A failed experiment leaves its field out and says why in a note.
	defer func() {
		if t.Failed() {
			t.Logf("notes: %q\nstderr:\n%s", rep.Notes, r.stderr)
		}
	}()
	switch {
	case s.Held != 200 || s.Fill == nil || s.Fill.Locks != 200 || s.Fill.RateOpsS <= 0:
		t.Errorf("size 200: fill %+v; want 200 locks at a rate > 0", s.Fill)
	case s.IdleLeaderCPU == nil:
		t.Error("size 200: no idle leader CPU")
	case s.CatchUp == nil || s.CatchUp.Seconds <= 0 || !s.CatchUp.BySnapshot:
		t.Errorf("size 200: catch-up %+v; want a time, by snapshot", s.CatchUp)
	case s.Join == nil || s.Join.Seconds <= 0 || !s.Join.BySnapshot:
		t.Errorf("size 200: join %+v; want a time, by snapshot", s.Join)
	case rep.Scale[0].CatchUp != nil || rep.Scale[0].Join != nil:
		t.Errorf("size 0: catch-up or join measured: %+v", rep.Scale[0])
	}
	for _, f := range []string{"scale.md", "scale.png", "bench.md"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "scale.md"))
	if !strings.Contains(string(md), "raftlock bench --held 0,200") || !strings.Contains(string(md), "| 200 |") {
		t.Errorf("scale.md lacks the command or the 200 row:\n%s", md)
	}
}

// bench --held against a cluster it did not start releases every lock it
// took: after a run to the end, and after Ctrl-C in the middle of the fill.
func TestBenchHeldOnEndpointsLeavesNoLockHeld(t *testing.T) {
	startsProcesses(t)
	c, ctx, cl := readyProcessCluster(t, 3*time.Minute)
	eps := strings.Join(c.endpoints(), ",")
	r := runCLI(t, c.bin, nil, "bench", "--endpoints", eps, "--held", "300", "--key-size", "250", "--clients", "2",
		"--duration", "300ms", "--warmup", "0s", "--json")
	if r.code != 0 {
		t.Fatalf("bench --held --endpoints: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rep := decodeHeld(t, []byte(r.stdout))
	if len(rep.Scale) != 1 || rep.Scale[0].Fill == nil || rep.Scale[0].Fill.Locks != 300 || rep.Released == nil || *rep.Released != 300 {
		t.Fatalf("want 300 locks filled and released:\n%s", r.stdout)
	}
	if rep.Scale[0].CatchUp != nil || rep.Scale[0].IdleLeaderCPU != nil {
		t.Errorf("cluster experiments ran on a cluster the bench did not start: %+v", rep.Scale[0])
	}
	waitLocks(ctx, t, cl, c.endpoints(), func(n uint64) bool { return n == 0 })

	cmd := exec.Command(c.bin, "bench", "--endpoints", eps, "--held", "1000000", "--fill-clients", "16", "--clients", "1", "--duration", "300ms")
	sc := startScanning(t, cmd, cmd.StderrPipe)
	var tail strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sc.Scan() {
			tail.WriteString(sc.Text() + "\n")
		}
	}()
	waitLocks(ctx, t, cl, c.endpoints(), func(n uint64) bool { return n >= 100 })
	err := interrupt(cmd)
	<-done
	if exitCode(err) != exitInterrupted {
		t.Fatalf("interrupted bench --held: %v, want exit %d\n%s", err, exitInterrupted, tail.String())
	}
	if !strings.Contains(tail.String(), "released") {
		t.Errorf("no release reported:\n%s", tail.String())
	}
	waitLocks(ctx, t, cl, c.endpoints(), func(n uint64) bool { return n == 0 })
}

// The plain workloads against a cluster the bench did not start release
// every lock they took: after a run to its end, and after Ctrl-C while
// their clients hold locks and wait for more. The leases are an hour, so
// a lock still held when the wait ends was left behind, not expiring.
func TestBenchOnEndpointsLeavesNoLockHeld(t *testing.T) {
	startsProcesses(t)
	c, ctx, cl := readyProcessCluster(t, 3*time.Minute)
	eps := strings.Join(c.endpoints(), ",")
	r := runCLI(t, c.bin, nil, "bench", "--endpoints", eps, "--workload", "uncontended,contended,mixed", "--clients", "64",
		"--lease", "1h", "--duration", "300ms", "--warmup", "0s")
	if r.code != 0 {
		t.Fatalf("bench --endpoints: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	waitLocks(ctx, t, cl, c.endpoints(), func(n uint64) bool { return n == 0 })

	for _, w := range []string{"uncontended", "contended"} {
		cmd := exec.Command(c.bin, "bench", "--endpoints", eps, "--workload", w, "--clients", "64", "--lease", "1h",
			"--duration", "1m", "--warmup", "0s")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		waitLocks(ctx, t, cl, c.endpoints(), func(n uint64) bool { return n > 0 })
		if err := interrupt(cmd); exitCode(err) != exitInterrupted {
			t.Fatalf("interrupted bench --endpoints --workload %s: %v, want exit %d\n%s", w, err, exitInterrupted, stderr.String())
		}
		waitLocks(ctx, t, cl, c.endpoints(), func(n uint64) bool { return n == 0 })
	}
}

// waitLocks waits until the leader's table holds a number of locks ok
// accepts.
func waitLocks(ctx context.Context, t *testing.T, cl *client.Client, eps []string, ok func(uint64) bool) {
	t.Helper()
	waitUntil(ctx, t, "the lock count", func() bool {
		for _, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Status(sctx, ep)
			cancel()
			if err == nil && st.Role == "leader" {
				return ok(st.Locks)
			}
		}
		return false
	})
}

// The --held flags are checked before anything starts, and --help lists
// each of them.
func TestBenchHeldFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--held", "100", "--compare", "etcd"},
		{"bench", "--held", "-1"},
		{"bench", "--held", "10", "--key-size", "10"},
		{"bench", "--held", "10", "--key-size", "300"},
		{"bench", "--held", "10", "--fill-clients", "0"},
	} {
		if code, _, stderr := cli(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, stderr)
		}
	}
	code, _, help := cli(t, "bench", "--help")
	if code != 0 {
		t.Fatalf("bench --help: exit %d", code)
	}
	for _, f := range []string{"--held", "--key-size", "--fill-clients", "--catch-up", "--snapshot-every"} {
		if !strings.Contains(help, "\n  "+f+" ") && !strings.Contains(help, "\n  "+f+"\n") {
			t.Errorf("bench --help does not list %s:\n%s", f, help)
		}
	}
}

// benchJSON is what these tests read back from bench.json.
type benchJSON struct {
	TLS  bool `json:"tls"`
	Runs []struct {
		System          string   `json:"system"`
		Ops             int64    `json:"ops"`
		Errors          int64    `json:"errors"`
		EntriesPerFsync *float64 `json:"entries_per_fsync"`
	} `json:"runs"`
}

func readBenchJSON(t *testing.T, dir string) benchJSON {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	return decodeJSON[benchJSON](t, "bench.json", b)
}

// bench --tls starts its cluster with fresh certificates, the members serve
// mutual TLS, and the bench's clients complete ops with a client
// certificate; the metrics (entries per fsync) come over HTTPS.
func TestBenchTLSStartsSecuredCluster(t *testing.T) {
	startsProcesses(t)
	bin := buildBinary(t)
	data, out := t.TempDir(), filepath.Join(t.TempDir(), "results")
	r := runCLI(t, bin, nil, "bench", "--tls", "--clients", "4", "--duration", "1s", "--warmup", "200ms",
		"--data", data, "--out", out)
	if r.code != 0 {
		t.Fatalf("bench --tls: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readBenchJSON(t, out)
	if !rep.TLS || len(rep.Runs) != 1 {
		t.Fatalf("bench.json: tls=%v, %d runs; want tls and one run", rep.TLS, len(rep.Runs))
	}
	x := rep.Runs[0]
	if x.System != "raftlock --tls" || x.Ops == 0 || x.Errors != 0 || x.EntriesPerFsync == nil {
		t.Fatalf("run %+v: want ops, no errors, and metrics scraped over HTTPS", x)
	}
	for _, f := range []string{"ca.pem", "member-1.pem", "member-3-key.pem", "client-bench.pem"} {
		if _, err := os.Stat(filepath.Join(data, "tls", f)); err != nil {
			t.Errorf("certificate files: %v", err)
		}
	}
}

// bench --endpoints against a running secured cluster: the client's
// certificate, key and CA come from RAFTLOCK_CERT/KEY/CA (and the
// endpoints from RAFTLOCK_ENDPOINTS), as for every other command.
func TestBenchEndpointsWithClientCertificate(t *testing.T) {
	startsProcesses(t)
	tc := newTLSCluster(t, "")
	out := filepath.Join(t.TempDir(), "results")
	r := runCLI(t, tc.bin, tc.as("admin"), "bench", "--clients", "4", "--duration", "1s", "--warmup", "200ms", "--out", out)
	if r.code != 0 {
		t.Fatalf("bench --endpoints with certificates: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readBenchJSON(t, out)
	if !rep.TLS || len(rep.Runs) != 1 || rep.Runs[0].Ops == 0 || rep.Runs[0].Errors != 0 {
		t.Fatalf("bench.json: %+v; want tls and a run that completed ops", rep)
	}
}

// --tls starts a cluster; it does not mix with --endpoints, and client
// certificates without --endpoints would be silently unused.
func TestBenchTLSFlagsAreCheckedFirst(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--tls", "--endpoints", "127.0.0.1:1"},
		{"bench", "--cert", "c.pem", "--key", "k.pem", "--ca", "ca.pem"},
	} {
		if code, _, stderr := cli(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, stderr)
		}
	}
}

// Ctrl-C in the middle of a bench keeps what was already measured: the
// results are written, marked partial, and the exit status says so.
func TestBenchInterruptedWritesPartialResults(t *testing.T) {
	startsProcesses(t)
	bin := buildBinary(t)
	out := filepath.Join(t.TempDir(), "results")
	cmd := exec.Command(bin, "bench", "--clients", "1,2", "--workload", "uncontended", "--duration", "2s",
		"--warmup", "0s", "--out", out)
	sc := startScanning(t, cmd, cmd.StderrPipe)
	for sc.Scan() {
		// The first run's result line (progress lines have no p50), then
		// the second run starts.
		if strings.Contains(sc.Text(), "c=1 ") && strings.Contains(sc.Text(), "ops/s p50") {
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	time.Sleep(200 * time.Millisecond) // into the second run
	if err := interrupt(cmd); exitCode(err) != exitInterrupted {
		t.Fatalf("interrupted bench: %v, want exit %d", err, exitInterrupted)
	}
	b, err := os.ReadFile(filepath.Join(out, "bench.json"))
	if err != nil {
		t.Fatalf("no results written: %v", err)
	}
	var rep struct {
		Partial bool              `json:"partial"`
		Runs    []json.RawMessage `json:"runs"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || !rep.Partial || len(rep.Runs) != 1 {
		t.Fatalf("bench.json: partial=%v runs=%d (%v), want partial with the one finished run", rep.Partial, len(rep.Runs), err)
	}
}

// bench --repeat is checked before anything starts.
func TestBenchRepeatMustBePositive(t *testing.T) {
	code, _, stderr := cli(t, "bench", "--repeat", "0")
	if code != exitUsage || !strings.Contains(stderr, "--repeat must be at least 1") {
		t.Errorf("bench --repeat 0: exit %d, %q; want a usage error", code, stderr)
	}
}

// A bench whose stdout is a pipe nobody reads any more (bench | head)
// still removes its data directory: SIGPIPE stops it as Ctrl-C does.
func TestBenchWithAClosedStdoutRemovesItsDataDirectory(t *testing.T) {
	startsProcesses(t)
	bin := buildBinary(t)
	tmp := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the bench writes
	cmd := exec.Command(bin, "bench", "--clients", "1", "--duration", "300ms", "--warmup", "0s")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = w, &stderr
	err = cmd.Run()
	w.Close()
	if ee, ok := err.(*exec.ExitError); ok && !ee.Exited() {
		t.Fatalf("bench killed by %v with stdout closed; want it to stop on its own\n%s", ee, stderr.String())
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "raftlock-bench-*"))
	if len(left) > 0 {
		t.Errorf("data directories left behind: %v\n%s", left, stderr.String())
	}
}

package chaos

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/internal/testbin"
	"github.com/raftlock/raftlock/node/nodetest"
)

// The tests that start raftlock's processes (skipped under -short): a
// cluster driven by hand, and whole runs as raftlock chaos carries them
// out, which share their set-up here.

// buildRaftlock builds the raftlock binary from this tree.
func buildRaftlock(t *testing.T) string { return testbin.Build(t, "../cmd/raftlock") }

// shortRun is a short run's settings: a few clients on two keys under
// nemeses, members of the raftlock built from this tree. The test is
// skipped under -short: it starts processes.
func shortRun(t *testing.T, seed uint64, resource workload.Resource, nemeses ...fault.Family) Config {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	return Config{Bin: buildRaftlock(t), Out: t.TempDir(), Nodes: 3, Seed: seed, Time: 8 * time.Second, Clients: 6, Keys: 2,
		Nemeses: nemeses, FaultInterval: time.Second, FaultDuration: 1500 * time.Millisecond,
		LeaseMin: 200 * time.Millisecond, LeaseMax: 500 * time.Millisecond, SnapshotEvery: 100, SnapshotKeep: 20, Resource: resource}
}

// runAndCheck carries cfg out as raftlock chaos does, its reports
// written into cfg.Out, and returns the verdict.
func runAndCheck(t *testing.T, cfg Config) *checker.Verdict {
	t.Helper()
	v, _, err := RunAndCheck(context.Background(), cfg, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// runChecked carries cfg out and checks its result, writing no report.
func runChecked(t *testing.T, cfg Config) (*checker.Verdict, *Result) {
	t.Helper()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return Check(res, 0), res
}

// readReport is the text of the file name the run wrote into cfg.Out.
func readReport(t *testing.T, cfg Config, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.Out, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// failed says whether check found violations.
func failed(v *checker.Verdict, check string) bool {
	for _, r := range v.Checks {
		if r.Name == check {
			return r.Status == checker.StatusViolation
		}
	}
	return false
}

// Three `raftlock node` processes; the leader is killed with SIGKILL; the
// lock survives with its token, the next grant gets a higher token, and the
// restarted member catches up.
func TestKillLeaderProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	sup, err := NewSupervisor(ClusterSpec{Bin: buildRaftlock(t), Dir: t.TempDir(), Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := sup.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl := nodetest.Client(t, sup.ClientAddrs()...)
	g, err := cl.Acquire(ctx, "k", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	leader := sup.Leader(ctx)
	if leader == 0 {
		t.Fatal("no leader")
	}
	sup.Kill(ctx, leader)
	info, err := cl.Get(ctx, "k")
	if err != nil || !info.Held || info.Token != g.Token {
		t.Fatalf("after SIGKILL of leader %d: %+v, %v; want held by %d", leader, info, err, g.Token)
	}
	if nl := sup.Leader(ctx); nl == leader || nl == 0 {
		t.Fatalf("leader after the kill: %d", nl)
	}
	g2, err := cl.Acquire(ctx, "k2", time.Minute, 0)
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("next grant %+v, %v; want a token above %d", g2, err, g.Token)
	}
	if err := sup.StartNode(leader); err != nil {
		t.Fatal(err)
	}
	for {
		st := sup.Status(ctx)
		back, ok := st[leader]
		caught := ok && len(st) == 3
		for _, s := range st {
			caught = caught && s.Applied == back.Applied && s.Digest == back.Digest
		}
		if caught {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("restarted member %d did not catch up: %+v", leader, st)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A short run with its clients spread over every protocol, the leader
// killed now and then, is valid: the same checks hold whatever protocol a
// call took (the audit included: the API carries the calls' tags).
func TestRunOverEveryProtocolIsValid(t *testing.T) {
	cfg := shortRun(t, 21, workload.Fenced, fault.FamilyKill)
	cfg.Time, cfg.Protocols = 4*time.Second, apiclient.Protocols()
	if v := runAndCheck(t, cfg); !v.Valid {
		t.Fatalf("verdict %s (reports in %s): %+v", v.Verdict, cfg.Out, v.Checks)
	}
	if summary := readReport(t, cfg, "summary.md"); !strings.Contains(summary, "Protocols: "+strings.Join(cfg.Protocols, ", ")) {
		t.Fatalf("summary.md does not name the protocols:\n%s", summary)
	}
}

// With the unfenced register a holder that stalled past its lease (the
// plan's stall, one critical section in twenty) overwrites the next
// holder's update: the fenced-resource check finds it, and the run is
// invalid (exit 1), its mode named in the header and summary.md.
func TestUnfencedResourceShowsLostUpdates(t *testing.T) {
	cfg := shortRun(t, 3, workload.Unfenced)
	v := runAndCheck(t, cfg)
	if v.Valid || v.ExitCode != checker.ExitViolation || !failed(v, "fenced-resource") {
		t.Fatalf("unfenced run: verdict %s, exit %d; want fenced-resource violated (reports in %s)", v.Verdict, v.ExitCode, cfg.Out)
	}
	if summary := readReport(t, cfg, "summary.md"); !strings.Contains(summary, "Resource: unfenced") {
		t.Fatalf("summary.md does not name the resource:\n%s", summary)
	}
	if hist := readReport(t, cfg, "history.jsonl"); !strings.Contains(strings.SplitN(hist, "\n", 2)[0], `"resource":"unfenced"`) {
		t.Fatal("history header does not name the resource")
	}
}

// clientPauseRun runs a short run with two client processes under the
// client-pause family alone, and returns its verdict and the history
// processes it paused.
func clientPauseRun(t *testing.T, resource workload.Resource) (*checker.Verdict, *Result, []history.Process) {
	t.Helper()
	cfg := shortRun(t, 11, resource, fault.FamilyClientPause)
	cfg.Time, cfg.ClientProcs, cfg.Clients = 10*time.Second, 2, 3
	v, res := runChecked(t, cfg)
	var paused []history.Process
	for _, e := range res.Events {
		if e.F == history.FaultClientPause {
			paused = append(paused, e.Value.Processes...)
		}
	}
	if len(paused) == 0 {
		t.Fatalf("no client pause in the history (logs in %s)", cfg.Out)
	}
	return v, res, paused
}

// A client process paused past its lease between its read and its write
// overwrites the next holder's update when nothing fences the register:
// the fenced-resource check names the paused client's write, and the run
// is invalid (exit 1).
func TestUnfencedRegisterUnderClientPausesLosesUpdates(t *testing.T) {
	v, _, paused := clientPauseRun(t, workload.Unfenced)
	if v.Valid || v.ExitCode != checker.ExitViolation {
		t.Fatalf("verdict %s, exit %d; want a violation", v.Verdict, v.ExitCode)
	}
	for _, r := range v.Checks {
		if r.Name != "fenced-resource" {
			continue
		}
		for _, vi := range r.Violations {
			for _, e := range vi.Events {
				if slices.Contains(paused, e.Process) {
					return
				}
			}
		}
		t.Fatalf("no fenced-resource violation names a paused client (paused %v): %+v", paused, r.Violations)
	}
	t.Fatal("no fenced-resource check")
}

// The same pauses against the fenced store: the paused client's write is
// refused as stale, and the run is valid.
func TestFencedStoreUnderClientPausesStaysValid(t *testing.T) {
	v, res, paused := clientPauseRun(t, workload.Fenced)
	if !v.Valid {
		t.Fatalf("verdict %s: %+v", v.Verdict, v.Checks)
	}
	stale := false
	for _, e := range res.Events {
		stale = stale || (slices.Contains(paused, e.Process) && e.Value.Error == "stale-token")
	}
	if !stale {
		t.Logf("no paused client's access was refused as stale (the next holder may not have written while it was paused)")
	}
}

// A short run with only the garbage family, without TLS: garbage and
// forged raft messages (a hello claiming another member, then MsgApp,
// MsgTimeoutNow and MsgVote at absurd terms and indexes, appends whose
// entries restart at a committed index, snapshots raft cannot restore or
// the member cannot decode) reach every member straight, and the run
// stays valid with no member crashed.
func TestGarbageRunStaysValid(t *testing.T) {
	var progress strings.Builder
	cfg := shortRun(t, 7, "", fault.FamilyGarbage)
	cfg.Clients, cfg.FaultInterval, cfg.FaultDuration, cfg.LeaseMax, cfg.Progress = 4, 500*time.Millisecond, 2*time.Second, time.Second, &progress
	v, res := runChecked(t, cfg)
	if !v.Valid || len(res.Crashes) > 0 {
		t.Fatalf("verdict %s, crashes %v; logs in %s", v.Verdict, res.Crashes, cfg.Out)
	}
	g := res.Garbage
	if g == nil || g.Conns == 0 || g.Forged == 0 || g.Client == 0 || g.Bytes == 0 {
		t.Fatalf("garbage report %+v: nothing sent", g)
	}
	if g.Members["peer_conns_closed"] == 0 || g.Members["client_conns_closed"] == 0 {
		t.Errorf("members logged no refused connection: %v", g.Members)
	}
	if !strings.Contains(progress.String(), "chaos: garbage: ") {
		t.Errorf("no garbage line in the progress output:\n%s", progress.String())
	}
	windows := 0
	for _, e := range res.Events {
		if e.F == "garbage" {
			windows++
		}
	}
	if windows == 0 {
		t.Error("no garbage window in the history")
	}
	t.Logf("garbage: %+v", *g)
}

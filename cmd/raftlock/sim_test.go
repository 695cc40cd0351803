package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// The simulator replaces the process-global crypto/rand.Reader while it
// runs, so these tests run it in subprocesses, as the swarm does; one
// build serves them all.
func TestSim(t *testing.T) {
	bin := buildBinary(t)
	t.Run("ShrinksAFailingSeed", func(t *testing.T) { testSimShrinksAFailingSeed(t, bin) })
	t.Run("SwarmIsValidAndSummarised", func(t *testing.T) { testSimSwarmIsValidAndSummarised(t, bin) })
	t.Run("RefusesBadFlagsAndForeignOut", func(t *testing.T) { testSimRefusesBadFlagsAndForeignOut(t, bin) })
	t.Run("HeldLocksCatchSnapshotPartial", func(t *testing.T) { testSimHeldLocksCatchSnapshotPartial(t, bin) })
	t.Run("CtrlCCountsNoSeedAsFailing", func(t *testing.T) { testSimCtrlCCountsNoSeedAsFailing(t, bin) })
	t.Run("MembershipCatchesNoSnapshotOnAdd", func(t *testing.T) { testSimMembershipCatchesNoSnapshotOnAdd(t, bin) })
}

// testSimCtrlCCountsNoSeedAsFailing: Ctrl-C (SIGINT to the whole process
// group, as a terminal sends it) stops a swarm; the seeds it cut short
// are interrupted, neither valid nor failing, in the text and the JSON
// summary, and with no violation found the exit is 130, never 1.
func testSimCtrlCCountsNoSeedAsFailing(t *testing.T, bin string) {
	for _, asJSON := range []bool{false, true} {
		args := []string{"sim", "--seeds", "1..100000", "--duration", "30s", "--parallel", "2", "--out", t.TempDir()}
		if asJSON {
			args = append(args, "--json")
		}
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		progress, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		// Interrupt once a seed has finished, with the next ones running.
		sc := bufio.NewScanner(progress)
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.HasPrefix(sc.Text(), "sim: ") && !strings.HasPrefix(sc.Text(), "sim: 0/") {
				break
			}
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if err = cmd.Wait(); exitCode(err) != exitInterrupted {
			t.Fatalf("json=%v: interrupted swarm: %v, want exit %d; stdout %s\nstderr %s", asJSON, err, exitInterrupted, stdout.String(), strings.Join(lines, "\n"))
		}
		if last := lines[len(lines)-1]; !strings.Contains(last, "interrupted") || !strings.Contains(last, "no violation") {
			t.Errorf("json=%v: last line %q", asJSON, last)
		}
		if !asJSON {
			out := stdout.String()
			// SEEDS VALID FAILING ...: every seed that finished valid, none failing.
			m := regexp.MustCompile(`(?m)^(\d+) +(\d+) +(\d+) `).FindStringSubmatch(out)
			if strings.Contains(out, "simulator failed") || m == nil || m[1] != m[2] || m[3] != "0" || !strings.Contains(out, "interrupted: ") {
				t.Errorf("text summary of an interrupted swarm:\n%s", out)
			}
			continue
		}
		objs := jsonLines(t, stdout.String())
		sum, _ := objs[len(objs)-1]["summary"].(map[string]any)
		failing, _ := sum["failing_seeds"].([]any)
		errs, _ := sum["error_seeds"].([]any)
		cut, _ := sum["interrupted_seeds"].([]any)
		if sum == nil || len(failing) != 0 || len(errs) != 0 || len(cut) == 0 || sum["seeds"] != sum["valid"] {
			t.Fatalf("JSON summary of an interrupted swarm: %v", objs[len(objs)-1])
		}
	}
}

// testSimMembershipCatchesNoSnapshotOnAdd: the membership family is in
// the default set; a swarm counts its changes in the summary, and the
// planted no-snapshot-on-add fails seed 1 (10 s) by newcomer-stuck, whose
// report names the changes.
func testSimMembershipCatchesNoSnapshotOnAdd(t *testing.T, bin string) {
	lines := swarmJSON(t, bin, "--seeds", "1..2", "--duration", "5s", "--faults", "membership")
	sum, _ := lines[len(lines)-1]["summary"].(map[string]any)
	if sum == nil || sum["members_removed"].(float64) < 1 || sum["members_added"] != sum["members_removed"] ||
		sum["members_replaced"] != sum["members_added"] {
		t.Fatalf("summary %v", lines[len(lines)-1])
	}
	simOut := filepath.Join(t.TempDir(), "sim-out")
	stdout, stderr, code := runBin(t, bin, "sim", "--seeds", "1..2", "--duration", "5s", "--faults", "membership", "--out", simOut)
	if code != 0 || !strings.Contains(stdout, "membership: ") || !strings.Contains(stdout, " members removed, ") {
		t.Fatalf("exit %d; stdout %s stderr %s", code, stdout, stderr)
	}
	if _, err := os.Stat(simOut); !os.IsNotExist(err) {
		t.Errorf("a swarm with no failing seed left its --out directory behind (%v)", err)
	}
	out := t.TempDir()
	stdout, stderr, code = runBin(t, bin, "sim", "--seed", "1", "--duration", "10s", "--unsafe-bug", "no-snapshot-on-add",
		"--out", out, "--json")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout %s stderr %s", code, stdout, stderr)
	}
	if rep := jsonLines(t, stdout)[0]; rep["check"] != "newcomer-stuck" {
		t.Fatalf("report %v", rep)
	}
	sumMD, err := os.ReadFile(filepath.Join(out, "seed-1", "summary.md"))
	if err != nil || !bytes.Contains(sumMD, []byte("| members removed / added / promoted (by snapshot) |")) ||
		!bytes.Contains(sumMD, []byte("refused")) {
		t.Fatalf("summary.md (%v):\n%s", err, sumMD)
	}
}

// testSimHeldLocksCatchSnapshotPartial: --held fills a table before the
// workload (recorded in the history's header and the summary), and with
// it the planted snapshot-partial fails seed 12 by snapshot-integrity; the
// replay command keeps --held.
func testSimHeldLocksCatchSnapshotPartial(t *testing.T, bin string) {
	out := t.TempDir()
	stdout, stderr, code := runBin(t, bin, "sim", "--seed", "12", "--duration", "10s", "--held", "2000",
		"--unsafe-bug", "snapshot-partial", "--out", out, "--json")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout %s stderr %s", code, stdout, stderr)
	}
	rep := jsonLines(t, stdout)[0]
	stats, _ := rep["stats"].(map[string]any)
	if rep["check"] != "snapshot-integrity" || stats["held"] != float64(2000) || stats["snapshots_partial"].(float64) < 1 {
		t.Fatalf("report %v", rep)
	}
	if replay, _ := rep["replay"].(string); !strings.Contains(replay, "--held 2000") {
		t.Fatalf("replay %q lacks --held", replay)
	}
	hist, err := os.ReadFile(filepath.Join(out, "seed-12", "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := bytes.Cut(hist, []byte("\n"))
	if !bytes.Contains(header, []byte(`"held":2000`)) || !bytes.Contains(header, []byte(`"key_size":250`)) {
		t.Fatalf("header %s", header)
	}
	sum, err := os.ReadFile(filepath.Join(out, "seed-12", "summary.md"))
	if err != nil || !bytes.Contains(sum, []byte("2000 locks held before the workload (keys of 250 bytes")) {
		t.Fatalf("summary.md (%v):\n%s", err, sum)
	}
	if _, stderr, code := runBin(t, bin, "sim", "--seed", "12", "--duration", "10s", "--held", "2000", "--out", t.TempDir()); code != 0 {
		t.Fatalf("without the bug: exit %d; %s", code, stderr)
	}
}

// runBin is runCLI with its outcome as three values.
func runBin(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	r := runCLI(t, bin, nil, args...)
	return r.stdout, r.stderr, r.code
}

func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// testSimShrinksAFailingSeed: with a planted bug a seed fails; --shrink
// finds a smaller run that fails with the same check, and the command it
// prints replays that failure.
func testSimShrinksAFailingSeed(t *testing.T, bin string) {
	out := t.TempDir()
	stdout, stderr, code := runBin(t, bin, "sim", "--seed", "1", "--duration", "5s", "--unsafe-bug", "early-expire",
		"--shrink", "--out", out, "--json")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (a violation); stderr %s", code, stderr)
	}
	reps := jsonLines(t, stdout)
	if len(reps) != 1 {
		t.Fatalf("want one JSON object, got %d: %s", len(reps), stdout)
	}
	rep := reps[0]
	check, _ := rep["check"].(string)
	shrunk, _ := rep["shrunk"].(map[string]any)
	if check == "" || shrunk == nil || shrunk["check"] != check {
		t.Fatalf("no shrink result with the same check: %s", stdout)
	}
	if ops, _ := shrunk["max_ops"].(float64); ops <= 0 || ops >= rep["stats"].(map[string]any)["invoked"].(float64) {
		t.Errorf("shrunk to %v operations, from %v: not smaller", shrunk["max_ops"], rep["stats"].(map[string]any)["invoked"])
	}
	for _, name := range []string{"history.jsonl", "trace.log", "summary.md"} {
		for _, dir := range []string{"seed-1", "seed-1-shrunk"} {
			if fi, err := os.Stat(filepath.Join(out, dir, name)); err != nil || fi.Size() == 0 {
				t.Errorf("%s/%s: %v", dir, name, err)
			}
		}
	}
	replay := strings.Fields(shrunk["replay"].(string))
	if replay[0] != "raftlock" || replay[1] != "sim" {
		t.Fatalf("replay command %q", replay)
	}
	stdout, stderr, code = runBin(t, bin, append(replay[1:], "--out", t.TempDir())...)
	if code != 1 || !strings.HasPrefix(stdout, "seed 1: "+check+"\n") {
		t.Fatalf("the shrunk run's replay: exit %d, %q (want seed 1: %s); stderr %s", code, stdout, check, stderr)
	}
}

// testSimSwarmIsValidAndSummarised: a small swarm of subprocesses, one
// JSON object per seed and a summary.
func testSimSwarmIsValidAndSummarised(t *testing.T, bin string) {
	lines := swarmJSON(t, bin, "--seeds", "1..4", "--duration", "4s", "--parallel", "2")
	if len(lines) != 5 {
		t.Fatalf("want 4 seeds and a summary, got %d lines: %v", len(lines), lines)
	}
	for i, l := range lines[:4] {
		if l["seed"] != float64(i+1) || l["verdict"] != "valid" {
			t.Errorf("line %d: %v", i, l)
		}
	}
	sum, _ := lines[4]["summary"].(map[string]any)
	if sum == nil || sum["seeds"] != float64(4) || sum["valid"] != float64(4) || sum["speedup"].(float64) <= 1 {
		t.Fatalf("summary %v", lines[4])
	}
	// A swarm set up in the environment does not make its children swarms.
	r := runCLI(t, bin, []string{"RAFTLOCK_SEEDS=5..6", "RAFTLOCK_DURATION=2s"}, "sim", "--out", t.TempDir())
	stdout, stderr, code := r.stdout, r.stderr, r.code
	if code != 0 || !strings.Contains(stdout, "SEEDS") {
		t.Fatalf("swarm from the environment: exit %d; stdout %s stderr %s", code, stdout, stderr)
	}
}

// testSimRefusesBadFlagsAndForeignOut: bad flags exit 3 (no verdict, as
// chaos and check); a report directory holding a user's files is never
// deleted.
func testSimRefusesBadFlagsAndForeignOut(t *testing.T, bin string) {
	for _, args := range [][]string{
		{"sim", "--nodes", "4"},
		{"sim", "--faults", "kill,meteor"},
		{"sim", "--unsafe-bug", "no-such-bug"},
		{"sim", "--unsafe-bug", "no-snapshot-on-add", "--faults", "kill,crash"},
		{"sim", "--unsafe-bug", "no-peer-input-checks"},
		{"sim", "--seeds", "5..1"},
		{"sim", "--seeds", "1..3", "--seed", "2"},
		{"sim", "--no-such-flag"},
		{"sim", "--held", "-1"},
		{"sim", "--held", "10", "--key-size", "8"},
		{"sim", "--held", "10", "--key-size", "300"},
	} {
		if _, stderr, code := runBin(t, bin, args...); code != 3 {
			t.Errorf("%v: exit %d, want 3; %s", args, code, stderr)
		}
	}
	out := t.TempDir()
	mine := filepath.Join(out, "seed-1", "notes.txt")
	os.MkdirAll(filepath.Dir(mine), 0o755)
	os.WriteFile(mine, []byte("mine"), 0o644)
	_, stderr, code := runBin(t, bin, "sim", "--seed", "1", "--duration", "3s", "--unsafe-bug", "early-expire", "--out", out)
	if code != 3 || !strings.Contains(stderr, "not a raftlock report") {
		t.Errorf("exit %d, stderr %q: want 3 and a refusal", code, stderr)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("the user's file is gone: %v", err)
	}
}

// swarmJSON runs a valid swarm (sim with args, --json, a fresh --out) and
// returns its JSON lines: one per seed, then the summary.
func swarmJSON(t *testing.T, bin string, args ...string) []map[string]any {
	t.Helper()
	stdout, stderr, code := runBin(t, bin, append(append([]string{"sim"}, args...), "--json", "--out", t.TempDir())...)
	if code != 0 {
		t.Fatalf("exit %d; stdout %s stderr %s", code, stdout, stderr)
	}
	return jsonLines(t, stdout)
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/procstat"
)

// Ctrl-C at three moments of a chaos run (while the cluster starts, in
// the middle of the workload, during the heal and final restarts): each
// time the run exits 130, its report says it was interrupted and where,
// its history is one raftlock check accepts, and nothing it started is
// left running. A harness killed outright (kill -9) leaves a history of
// whole lines that check accepts, and its members die with it.
func TestChaosCtrlC(t *testing.T) {
	startsProcesses(t)
	bin := buildBinary(t)
	// Faults often and short, so that the interruption meets one.
	faults := []string{"--seed", "5", "--fault-interval", "1s", "--fault-duration", "1s"}
	for _, tc := range []struct {
		name  string
		args  []string
		after string         // the progress line after which the signal comes
		sig   syscall.Signal // SIGINT to the process group, as a terminal sends it; SIGKILL to the harness alone
		where string         // the verdict's note, for SIGINT
		check int            // raftlock check's exit on the history
		// alone sends SIGINT to the harness only. While the cluster
		// starts, members are being forked, and a group signal that
		// lands on a child between its fork and its exec (still in the
		// harness's group, sharing its memory) crashed the Go runtime
		// ("fatal: morestack on gsignal", twice in nine runs): a
		// runtime hazard, not the harness's handling, which this tests.
		alone bool
	}{
		{"WhileTheClusterStarts", []string{"--duration", "30s"}, "chaos: seed ", syscall.SIGINT, "interrupted while the cluster started", 2, true},
		{"MidWorkload", []string{"--duration", "30s"}, " ok=", syscall.SIGINT, "interrupted during the workload, after ", 0, false},
		{"DuringTheHealAndRestarts", []string{"--duration", "3s"}, "chaos: workload done", syscall.SIGINT, "interrupted after the workload, ", 0, false},
		{"Kill9MidWorkload", []string{"--duration", "30s"}, " ok=", syscall.SIGKILL, "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report")
			code, stdout, progress := interruptChaos(t, bin, append(append([]string{"chaos", "--out", out}, faults...), tc.args...), tc.after, tc.sig, !tc.alone)
			if tc.sig == syscall.SIGINT {
				if code != exitInterrupted || !strings.Contains(progress, "chaos: interrupted: ") || !strings.Contains(stdout, "INTERRUPTED") {
					t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitInterrupted, stdout, progress)
				}
				verdictSaysInterrupted(t, out, tc.where)
			}
			checkAccepts(t, bin, filepath.Join(out, "history.jsonl"), tc.check)
			noneLeftNaming(t, out)
		})
	}
}

// A chaos run against etcd or Redis, interrupted in the middle of its
// workload, ends as a raftlock run does: exit 130, a report saying so, a
// history check accepts, and no server process left running. Skipped
// for a target that is not installed (make peers installs both).
func TestChaosCtrlCWithAPeerTarget(t *testing.T) {
	startsProcesses(t)
	var bin string
	for _, tc := range []struct{ target, server string }{{"etcd", "etcd"}, {"redis", "redis-server"}} {
		if _, err := exec.LookPath(tc.server); err == nil && bin == "" {
			bin = buildBinary(t)
		}
		t.Run(tc.target, func(t *testing.T) {
			if _, err := exec.LookPath(tc.server); err != nil {
				t.Skipf("%s is not installed (make peers installs it)", tc.server)
			}
			out := filepath.Join(t.TempDir(), "report")
			start := time.Now()
			code, stdout, progress := interruptChaos(t, bin, []string{"chaos", "--target", tc.target, "--out", out, "--seed", "5",
				"--duration", "60s", "--fault-interval", "1s", "--fault-duration", "1s"}, " ok=", syscall.SIGINT, true)
			if code != exitInterrupted {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitInterrupted, stdout, progress)
			}
			t.Logf("%s: interrupted after %.1fs\n%s", tc.target, time.Since(start).Seconds(), progress)
			verdictSaysInterrupted(t, out, "interrupted during the workload, after ")
			checkAccepts(t, bin, filepath.Join(out, "history.jsonl"), 0)
			noneLeftNaming(t, out)
		})
	}
}

// interruptChaos runs raftlock with args in a process group of its own,
// sends sig once a progress line holds after (SIGINT with toGroup to the
// whole group, as a terminal's Ctrl-C; otherwise to the harness alone),
// and returns its exit code (-1: killed), stdout and progress.
func interruptChaos(t *testing.T, bin string, args []string, after string, sig syscall.Signal, toGroup bool) (code int, stdout, progress string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout = &out
	sc := startScanning(t, cmd, cmd.StderrPipe)
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	var lines []string
	sent := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !sent && strings.Contains(sc.Text(), after) {
			sent = true
			if sig == syscall.SIGINT && toGroup {
				syscall.Kill(-cmd.Process.Pid, sig)
			} else {
				cmd.Process.Signal(sig)
			}
		}
	}
	err := cmd.Wait()
	progress = strings.Join(lines, "\n")
	if !sent {
		t.Fatalf("no progress line held %q: %v\nstderr:\n%s", after, err, progress)
	}
	return exitCode(err), out.String(), progress
}

// verdictSaysInterrupted checks the report in out: verdict.json says
// interrupted, exit 130, partial, with a note saying where (it starts
// with where), and summary.md says partial.
func verdictSaysInterrupted(t *testing.T, out, where string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "verdict.json"))
	if err != nil {
		t.Fatalf("no verdict written: %v", err)
	}
	var v struct {
		Valid    bool     `json:"valid"`
		Verdict  string   `json:"verdict"`
		ExitCode int      `json:"exit_code"`
		Partial  bool     `json:"partial"`
		Notes    []string `json:"notes"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Valid || v.Verdict != "interrupted" || v.ExitCode != exitInterrupted || !v.Partial ||
		len(v.Notes) == 0 || !strings.HasPrefix(v.Notes[len(v.Notes)-1], where) {
		t.Fatalf("verdict.json %s (%v): want verdict interrupted, exit_code %d, partial, a note starting %q", b, err, exitInterrupted, where)
	}
	if s, err := os.ReadFile(filepath.Join(out, "summary.md")); err != nil || !bytes.Contains(s, []byte("**Partial**")) {
		t.Fatalf("summary.md (%v) does not say partial:\n%s", err, s)
	}
}

// checkAccepts runs raftlock check on history, which must end with a
// whole line and exit with code (2: nothing to check, a history of a
// header alone), never calling it malformed.
func checkAccepts(t *testing.T, bin, history string, code int) {
	t.Helper()
	b, err := os.ReadFile(history)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("%s ends in the middle of a line: %q", history, b[max(len(b)-80, 0):])
	}
	stdout, stderr, got := runBin(t, bin, "check", history)
	if got != code || strings.Contains(stderr, "malformed") {
		t.Fatalf("check %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", history, got, code, stdout, stderr)
	}
}

// noneLeftNaming waits (10 s at most) until no process runs whose command
// line names dir: the members' data, etcd's and Redis's files are under
// it.
func noneLeftNaming(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := processesNaming(t, dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left running: %s", strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesNaming lists the running processes whose command line names
// dir, each as its pid and command line.
func processesNaming(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		if st, err := procstat.Read(pid); err == nil && st.Running() {
			out = append(out, strconv.Itoa(pid)+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return out
}

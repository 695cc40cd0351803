package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/raftlock/raftlock/internal/procstat"
	"github.com/raftlock/raftlock/internal/syncio"
	"github.com/raftlock/raftlock/node/nodetest"
)

// running reports whether process pid runs (a zombie does not).
func running(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && st.Running()
}

// readPid waits for a shell to write a pid into file, unless exec ends.
func readPid(t *testing.T, file string, exited <-chan struct{}, stderr *syncio.Buffer) int {
	t.Helper()
	var pid int
	nodetest.WaitFor(t, 20*time.Second, file, func() bool {
		select {
		case <-exited:
			t.Fatalf("exec ended before its command wrote %s: %s", filepath.Base(file), stderr.String())
		default:
		}
		b, err := os.ReadFile(file)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// exec releases the lock only once nothing of its command's process group
// runs, whatever ended the command: it exited and left a child behind, it
// was interrupted (the shell exits, its background child does not), or the
// lock was lost. The child ignores SIGTERM, so only SIGKILL stops it.
func TestExecLeavesNothingOfTheCommandRunning(t *testing.T) {
	eps := startCluster(t)
	bin := buildBinary(t)
	for _, tc := range []struct {
		name  string
		flags []string
		child string // the child's output
		main  string // what the command's shell does after starting the child
		code  int
	}{
		// --kill-after 1h: the test sees the lock held while the child
		// runs, then signals exec again, which kills at once.
		{"exit", []string{"--kill-after", "1h"}, ">/dev/null 2>&1", "exit 3", 3},
		// As a user's Ctrl-C: SIGINT to exec, passed on to the shell,
		// which exits 130 while its background child runs on, holding
		// the command's output open.
		{"interrupt", []string{"--kill-after", "300ms"}, "", "wait", 128 + 2},
		// Released behind exec's back: the lock is lost.
		{"lost", []string{"--lease", "1s", "--kill-after", "300ms"}, ">/dev/null 2>&1", "sleep 300", exitError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pgFile, childFile, tokFile := filepath.Join(dir, "pg"), filepath.Join(dir, "child"), filepath.Join(dir, "token")
			ready := filepath.Join(dir, "ready")
			key := "job-" + tc.name
			script := `echo "$RAFTLOCK_TOKEN" > ` + tokFile + `; echo $$ > ` + pgFile + `
(trap '' TERM; echo > ` + ready + `; exec sleep 300 ` + tc.child + `) &
echo $! > ` + childFile + `
while [ ! -e ` + ready + ` ]; do sleep 0.01; done
` + tc.main
			args := append([]string{"exec", key, "--endpoints", eps}, tc.flags...)
			cmd := exec.Command(bin, append(args, "--", "sh", "-c", script)...)
			out, errOut := syncio.NewBuffer(), syncio.NewBuffer()
			cmd.Stdout, cmd.Stderr = out, errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			t.Cleanup(func() { cmd.Process.Kill(); <-exited })
			pgid, child := readPid(t, pgFile, exited, errOut), readPid(t, childFile, exited, errOut)
			t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) }) // when exec failed to
			nodetest.WaitFor(t, 20*time.Second, "the child's SIGTERM trap", func() bool {
				_, err := os.Stat(ready)
				return err == nil
			})
			tok, err := os.ReadFile(tokFile)
			if err != nil {
				t.Fatal(err)
			}

			switch tc.name {
			case "interrupt":
				cmd.Process.Signal(syscall.SIGINT)
			case "lost":
				if code, _, e := cli(t, "release", key, "--token", strings.TrimSpace(string(tok)), "--endpoints", eps); code != 0 {
					t.Fatalf("release behind exec's back: exit %d %s", code, e)
				}
			}
			signalled := tc.name != "exit"
			var lastSignal time.Time
			deadline := time.After(60 * time.Second)
		watch:
			for {
				select {
				case <-exited:
					break watch
				case <-deadline:
					t.Fatalf("exec did not end; stderr %q", errOut.String())
				default:
				}
				// The lock first, the child after: a free lock and a
				// running child then mean it was released while the
				// child ran.
				_, got, _ := cli(t, "get", key, "--json", "--endpoints", eps)
				alive := running(child)
				if tc.name != "lost" && strings.Contains(got, `"held":false`) && alive {
					t.Fatalf("the lock was released while the command's child %d ran: %s", child, got)
				}
				_, err := procstat.Read(pgid)
				shellLeft := err == nil
				switch {
				case !signalled && alive && !shellLeft && strings.Contains(got, `"held":true`):
					// The shell is gone (reaped by exec), its child runs,
					// exec holds on.
					cmd.Process.Signal(syscall.SIGTERM)
					signalled, lastSignal = true, time.Now()
				case tc.name == "exit" && signalled && time.Since(lastSignal) > time.Second:
					// On a loaded machine exec may take that signal
					// before it has seen the shell's exit, and pass it on
					// to the group as a signal for the command; the next
					// one, as a user's second Ctrl-C, kills at once.
					cmd.Process.Signal(syscall.SIGTERM)
					lastSignal = time.Now()
				}
				time.Sleep(10 * time.Millisecond)
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Errorf("exec: exit %d, want %d; stderr %q", code, tc.code, errOut.String())
			}
			if running(child) {
				t.Fatalf("the child %d that ignores SIGTERM outlived exec; stderr %q", child, errOut.String())
			}
			if left, err := procstat.Group(pgid); err != nil || len(left) > 0 {
				t.Fatalf("processes %v of the command's group outlived exec (%v)", left, err)
			}
			if _, got, _ := cli(t, "get", key, "--json", "--endpoints", eps); !strings.Contains(got, `"held":false`) {
				t.Errorf("after exec: %s, want free", got)
			}
		})
	}
}

// A command given without "--" is a usage error that says so, in one
// line, rather than complain about the command's own flags (sh -c).
func TestExecWithoutDashDashSaysTheCommandMustFollowIt(t *testing.T) {
	const want = "raftlock exec: the command must follow --: raftlock exec KEY [flags] -- COMMAND [ARGS...]\n"
	for _, args := range [][]string{
		{"exec", "k", "sh", "-c", "echo hi"},
		{"exec", "k", "--lease", "5s", "ls", "-l"},
		{"exec", "k", "true"},
		{"exec", "k"},
	} {
		code, out, errOut := cli(t, append(args, "--endpoints", "127.0.0.1:1")...)
		if code != exitUsage || out != "" || errOut != want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", args, code, out, errOut, exitUsage, want)
		}
	}
	// With "--", exec's own bad flags are named as before.
	code, _, errOut := cli(t, "exec", "k", "--leese", "5s", "--endpoints", "127.0.0.1:1", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "flag provided but not defined: --leese") {
		t.Errorf("a bad flag before --: exit %d, stderr %q", code, errOut)
	}
}

// The job's environment names the lock without clobbering the flags of
// the raftlock commands the job runs: RAFTLOCK_KEY is --key, the TLS
// private key, so a job that ran `raftlock get` failed ("TLS needs
// --cert, --key and --ca together"). The owner exec records is --owner's.
func TestExecJobCanRunRaftlockItself(t *testing.T) {
	eps := startCluster(t)
	bin := buildBinary(t)
	script := `test "$RAFTLOCK_LOCK_KEY" = deploy && "$0" get "$RAFTLOCK_LOCK_KEY" --endpoints ` + eps +
		` && "$0" renew "$RAFTLOCK_LOCK_KEY" --lease 5s --endpoints ` + eps
	out, err := exec.Command(bin, "exec", "deploy", "--owner", "deployer", "--endpoints", eps, "--", "sh", "-c", script, bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "deploy is held by deployer: token") || !strings.Contains(string(out), "renewed deploy (token") {
		t.Fatalf("a job running raftlock get and renew (RAFTLOCK_TOKEN as --token): %v\n%s", err, out)
	}
}

// A script's & starts exec and acquire with SIGINT ignored; Ctrl-C (or a
// kill -INT) must still give up their wait for a held lock: exit 130, the
// command never ran, and the queue keeps nothing of them.
func TestSignalGivesUpTheWaitForALock(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	c.WaitLeader()
	waiting := func() (n float64) { // over every member: the leader may change
		for _, m := range c.Nodes() {
			n += gaugeValue(m.Metrics().Waiters)
		}
		return n
	}
	eps := strings.Join(c.Endpoints(), ",")
	bin := buildBinary(t)
	if code, _, errOut := cli(t, "acquire", "busy", "--lease", "1m", "--endpoints", eps); code != 0 {
		t.Fatalf("acquire: %s", errOut)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	for name, args := range map[string][]string{
		"exec":    {"exec", "busy", "--wait", "1m", "--endpoints", eps, "--", "touch", ran},
		"acquire": {"acquire", "busy", "--wait", "1m", "--endpoints", eps},
	} {
		t.Run(name, func(t *testing.T) {
			// trap '' INT: the shell and what it execs ignore SIGINT.
			cmd := exec.Command("sh", append([]string{"-c", `trap '' INT; exec "$0" "$@"`, bin}, args...)...)
			errOut := syncio.NewBuffer()
			cmd.Stderr = errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			// Once it waits in the queue, interrupt it.
			nodetest.WaitFor(t, 20*time.Second, "a waiter on busy", func() bool {
				return waiting() > 0
			})
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				t.Fatal("SIGINT did not end the wait")
			}
			if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(errOut.String(), "while waiting") {
				t.Fatalf("exit %d, stderr %q; want 130 and what was given up", code, errOut.String())
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("the command ran")
			}
			nodetest.WaitFor(t, 20*time.Second, "the queue empty again", func() bool {
				return waiting() == 0
			})
		})
	}
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}

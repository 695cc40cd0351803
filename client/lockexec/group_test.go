package lockexec

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/syncio"
)

// TestStopKillsAGroupThatIgnoresSIGTERM: a group whose processes ignore
// SIGTERM is killed after killAfter, and stop returns once none runs.
func TestStopKillsAGroupThatIgnoresSIGTERM(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap "" TERM; sleep 30 & sleep 30; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	g := &processGroup{pgid: cmd.Process.Pid, killAfter: 100 * time.Millisecond}
	// Wait until both children run, so that stop has a group to stop.
	for deadline := time.Now().Add(10 * time.Second); len(g.members()) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the group never had its 3 processes: %v", g.members())
		}
		time.Sleep(groupPoll)
	}
	var msgs bytes.Buffer
	g.stderr, g.note = &msgs, "sh exited"
	if err := g.stop(); err != nil {
		t.Fatal(err)
	}
	if left := g.members(); len(left) != 0 {
		t.Fatalf("processes %v still run after stop", left)
	}
	if !strings.Contains(msgs.String(), "sh exited; stopping what it left running") {
		t.Fatalf("stop said %q", msgs.String())
	}
	code, ok := ExitCode(<-exited)
	if !ok || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit code %d (%v), want %d", code, ok, 128+int(syscall.SIGKILL))
	}
}

func TestExitCode(t *testing.T) {
	err := exec.Command("sh", "-c", "exit 7").Run()
	if code, ok := ExitCode(err); !ok || code != 7 {
		t.Fatalf("ExitCode = %d, %v; want 7, true", code, ok)
	}
	if _, ok := ExitCode(nil); ok {
		t.Fatal("ExitCode(nil) is an exit status")
	}
	if _, ok := ExitCode(errors.New("wait failed")); ok {
		t.Fatal("a failure to wait is an exit status")
	}
}

func TestOutputCopiesDrainOnceTheWritersClose(t *testing.T) {
	var a, b bytes.Buffer
	outs, err := newOutputCopies(&syncio.Writer{W: &a}, &syncio.Writer{W: &b})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "echo out; echo err >&2")
	cmd.Stdout, cmd.Stderr = outs[0].w, outs[1].w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outs.started()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	outs.finish(OutputDrain)
	if a.String() != "out\n" || b.String() != "err\n" {
		t.Fatalf("copied %q and %q", a.String(), b.String())
	}
}

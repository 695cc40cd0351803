package main

// The helpers of the tests that run the raftlock binary: build it, run it
// once (runCLI), start it in the background (spawn, startScanning) and
// interrupt it as Ctrl-C would.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/raftlock/raftlock/internal/procattr"
	"github.com/raftlock/raftlock/internal/testbin"
)

// buildBinary builds the raftlock binary, from this tree, for t.
func buildBinary(t *testing.T) string { return testbin.Build(t, ".") }

// startsProcesses skips a test under -short: it starts processes.
func startsProcesses(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
}

// spawn starts bin with args, its output appended to the file log, in a
// process that dies with this one; exited is closed once it has exited.
func spawn(t *testing.T, bin, log string, args []string) (cmd *exec.Cmd, exited chan struct{}) {
	t.Helper()
	logf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procattr.Child()
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start raftlock %v: %v", args, err)
	}
	exited = make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(exited)
	}()
	return cmd, exited
}

// startScanning starts cmd and scans the output pipe gives (its
// StdoutPipe or StderrPipe); the process is killed when the test ends.
func startScanning(t *testing.T, cmd *exec.Cmd, pipe func() (io.ReadCloser, error)) *bufio.Scanner {
	t.Helper()
	r, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return bufio.NewScanner(r)
}

// startLocalCluster starts `raftlock cluster` with args in dir and
// returns it once it printed its banner, which ends with the endpoints
// line; the rest of its output is read and dropped. It is killed when the
// test ends.
func startLocalCluster(t *testing.T, bin, dir string, args ...string) (cmd *exec.Cmd, banner string) {
	t.Helper()
	cmd = exec.Command(bin, append([]string{"cluster"}, args...)...)
	cmd.Dir = dir
	sc := startScanning(t, cmd, cmd.StdoutPipe)
	var b strings.Builder
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "endpoints:") {
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return cmd, b.String()
}

// cliResult is one CLI run.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the binary with args and the environment env (added to
// this process's, without any RAFTLOCK_* of its own).
func runCLI(t *testing.T, bin string, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RAFTLOCK_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := exitCode(err)
	if code == -1 {
		t.Fatalf("raftlock %v: %v", args, err)
	}
	return cliResult{out.String(), errb.String(), code}
}

// exitCode is the exit status err, from a command's Run or Wait, stands
// for: 0 for nil, and -1 when the command did not run to an exit.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// interrupt sends cmd SIGINT, as Ctrl-C does, and waits for it to end.
func interrupt(cmd *exec.Cmd) error {
	cmd.Process.Signal(syscall.SIGINT)
	return cmd.Wait()
}

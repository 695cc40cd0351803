package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/node/embed"
)

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
	peer, cport, hport := port(), port(), port()
	endpoint := "127.0.0.1:" + cport
	start := func() (*exec.Cmd, string) {
		t.Helper()
		cmd := exec.Command(bin, "cluster", "--nodes", "1", "--peer-port", peer, "--client-port", cport, "--http-port", hport)
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

// Ctrl-C in the middle of a bench keeps what was already measured: the
// results are written, marked partial, and the exit status says so.
func TestBenchInterruptedWritesPartialResults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
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
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
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

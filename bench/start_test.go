package bench

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testbin"
)

// A member that finds its port taken exits while starting; the cluster
// starts again on new ports, and every member of the one returned answers.
func TestStartRaftlockPicksNewPortsWhenOneIsTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := testbin.Build(t, "../cmd/raftlock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	ports := func(n int) ([]int, error) {
		picks++
		p, err := freePorts(n)
		if picks == 1 && err == nil {
			p[len(p)-2] = taken.Addr().(*net.TCPAddr).Port // the last member's client port
		}
		return p, err
	}
	target, err := StartRaftlock(ctx, RaftlockConfig{Bin: bin, Dir: t.TempDir(), Nodes: 3, Lease: 10 * time.Second, Ports: ports})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer target.Close()
	if picks != 2 {
		t.Errorf("ports picked %d times, want 2 (the first set had a taken port)", picks)
	}
	rt := target.(*raftlockTarget)
	for _, m := range rt.members {
		if _, err := rt.status(ctx, m); err != nil || !m.proc.Running() {
			t.Errorf("member %d: %v (running %v)", m.id, err, m.proc.Running())
		}
	}
	if err := Settle(ctx, target); err != nil {
		t.Errorf("settle: %v", err)
	}

	// Taken on every attempt: three attempts, each in directories of its
	// own, and an error that names the member and why.
	dir, attempts := t.TempDir(), 0
	always := func(n int) ([]int, error) {
		attempts++
		if attempts > 1 {
			if _, err := os.Stat(filepath.Join(memberDir(dir, 1), "marker")); err == nil {
				t.Errorf("attempt %d found what attempt %d left in member 1's directory", attempts, attempts-1)
			}
		}
		if err := os.MkdirAll(memberDir(dir, 1), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(memberDir(dir, 1), "marker"), nil, 0o644); err != nil {
			return nil, err
		}
		p, err := freePorts(n)
		if err == nil {
			p[1] = taken.Addr().(*net.TCPAddr).Port
		}
		return p, err
	}
	_, err = StartRaftlock(ctx, RaftlockConfig{Bin: bin, Dir: dir, Nodes: 3, Lease: 10 * time.Second, Ports: always})
	if err == nil || !strings.Contains(err.Error(), "member 1 exited while starting") || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("start with a port always taken: %v; want member 1's exit and its reason", err)
	}
	if attempts != startAttempts {
		t.Errorf("%d attempts with a port always taken, want %d", attempts, startAttempts)
	}

	// Member directories that were there before are reused, never
	// cleared: one attempt, and what was there stays.
	kept := t.TempDir()
	if err := os.MkdirAll(memberDir(kept, 2), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(memberDir(kept, 2), "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	picks = 0
	ports = func(n int) ([]int, error) {
		picks++
		p, err := freePorts(n)
		if err == nil {
			p[1] = taken.Addr().(*net.TCPAddr).Port
		}
		return p, err
	}
	if _, err := StartRaftlock(ctx, RaftlockConfig{Bin: bin, Dir: kept, Nodes: 3, Lease: 10 * time.Second, Ports: ports}); err == nil || picks != 1 {
		t.Errorf("start in reused directories with a port taken: %v after %d attempts; want an error after 1", err, picks)
	}
	if _, err := os.Stat(filepath.Join(memberDir(kept, 2), "keep")); err != nil {
		t.Errorf("a reused member directory was cleared: %v", err)
	}
}

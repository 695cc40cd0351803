package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A member process that exits on its own is a crash, named with the panic
// line of its log; one the harness kills is not.
func TestSupervisorSeesCrashes(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-node")
	// Member 1 panics at once; member 2 runs until killed.
	script := "#!/bin/sh\ncase \" $* \" in\n*\" --id 1 \"*) echo 'panic: 1 state.commit 0 is out of range [100, 120]' >&2; exit 2;;\nesac\nexec sleep 60\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sup, err := NewSupervisor(ClusterSpec{Bin: bin, Dir: dir, Nodes: 2, SnapshotEvery: 100, SnapshotKeep: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(sup.Crashes()) == 1 })
	c := sup.Crashes()[0]
	if c.Node != 1 || c.Reason != "panic: 1 state.commit 0 is out of range [100, 120]" || !strings.Contains(c.Err, "exit status 2") {
		t.Fatalf("crash %+v", c)
	}
	if sup.Running(1) {
		t.Fatal("a crashed member still counts as running: HealAll would not restart it")
	}
	sup.Kill(context.Background(), 2)
	if err := sup.StartNode(1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(sup.Crashes()) == 2 })
	for _, c := range sup.Crashes() {
		if c.Node != 1 {
			t.Fatalf("member 2 was killed by the harness, yet reported: %+v", c)
		}
	}
	if got := sup.Stats().Restarts; got != 1 {
		t.Fatalf("restarts %d, want 1 (member 1 started twice)", got)
	}
}

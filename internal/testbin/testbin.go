// Package testbin builds the raftlock binary for tests that run real
// member processes.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the main package at dir (relative to the test's package)
// into a temporary directory and returns the binary's path.
func Build(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "raftlock")
	cmd := exec.Command("go", "build", "-o", bin, dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build raftlock: %v", err)
	}
	return bin
}

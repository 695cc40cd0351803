package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A member that would serve a non-loopback address without certificates
// refuses to start with one line naming the way out, and creates nothing
// (node/embed's TestSecurityChecks has the rest).
func TestSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--peers", "1=10.0.0.1:7001"},
		{"--peers", "1=127.0.0.1:7001", "--listen", "0.0.0.0:8001"},
		{"--peers", "1=127.0.0.1:7001", "--peer-listen", ":7001"},
		{"--peers", "1=127.0.0.1:7001", "--http", "192.168.1.4:9001"},
		{"--peers", "1=127.0.0.1:7001", "--advertise-client", "db1.example:8001"},
	} {
		full := append([]string{"node", "--id", "1", "--data", filepath.Join(dir, "d")}, args...)
		code, _, errOut := cli(t, full...)
		if code != exitError {
			t.Errorf("%v: exit %d, want %d", args, code, exitError)
		}
		if strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "--cert, --key and --ca") || !strings.Contains(errOut, "--insecure") {
			t.Errorf("%v: error %q does not name --cert/--key/--ca and --insecure on one line", args, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); err == nil {
		t.Error("a refused member created its data directory")
	}
}

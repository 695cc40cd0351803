package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/tlsconfig"
)

// A member that would serve a non-loopback address without certificates
// refuses to start with one line naming the way out; --insecure starts it
// with a loud warning; loopback-only members need nothing.
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

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	m := memberFlags{id: 1, listen: "0.0.0.0:8001", sec: securityFlags{insecure: true}}
	if _, _, err := checkSecurity(m, map[uint64]string{1: "10.0.0.1:7001"}, log); err != nil {
		t.Fatalf("--insecure: %v", err)
	}
	if !strings.Contains(logs.String(), "INSECURE") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("--insecure logged no loud warning: %q", logs.String())
	}
	logs.Reset()
	m = memberFlags{id: 1, listen: "127.0.0.1:8001", http: "localhost:9001"}
	if _, _, err := checkSecurity(m, map[uint64]string{1: "127.0.0.1:7001", 2: "10.0.0.2:7001"}, log); err != nil {
		t.Fatalf("loopback-only member: %v", err)
	}
	if logs.Len() != 0 {
		t.Errorf("a loopback-only member logged %q", logs.String())
	}

	// Certificates: they must be all three, and this member's.
	certs := t.TempDir()
	if _, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: certs, Members: 2}); err != nil {
		t.Fatal(err)
	}
	m = memberFlags{id: 1, listen: "0.0.0.0:8001", sec: securityFlags{files: tlsconfig.Files{Cert: filepath.Join(certs, "member-1.pem")}}}
	if _, _, err := checkSecurity(m, map[uint64]string{1: "10.0.0.1:7001"}, log); err == nil {
		t.Error("--cert without --key and --ca was accepted")
	}
	m.sec.files.Key, m.sec.files.CA = filepath.Join(certs, "member-1-key.pem"), filepath.Join(certs, "ca.pem")
	if _, _, err := checkSecurity(m, map[uint64]string{1: "10.0.0.1:7001"}, log); err != nil {
		t.Errorf("member 1 with its certificate: %v", err)
	}
	m.id = 2
	if _, _, err := checkSecurity(m, map[uint64]string{2: "10.0.0.1:7001"}, log); err == nil || !strings.Contains(err.Error(), "member 1's certificate") {
		t.Errorf("member 2 with member 1's certificate: %v", err)
	}
	// A bad ACL file refuses the start.
	bad := filepath.Join(certs, "acl.json")
	os.WriteFile(bad, []byte(`{"rules":[{"identity":"x","prefixes":[""],"rights":["fly"]}]}`), 0o644)
	m.id, m.sec.acl = 1, bad
	if _, _, err := checkSecurity(m, map[uint64]string{1: "10.0.0.1:7001"}, log); err == nil {
		t.Error("a bad ACL file was accepted")
	}
}

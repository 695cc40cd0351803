package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
)

// A flag value no command can mean is a usage error (exit 2) with one line
// naming the flag, before anything is dialled: the endpoint here refuses
// every connection, so reaching the network would exit 1.
func TestBadFlagValuesAreUsageErrors(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"acquire", "q", "--wait", "-1s"}, "--wait -1s: a duration must not be negative"},
		{[]string{"acquire", "q", "--lease", "-5s"}, "--lease -5s: a duration must not be negative"},
		{[]string{"acquire", "q", "--timeout", "-1s"}, "--timeout -1s: a duration must not be negative"},
		{[]string{"get", "q", "--timeout", "0s"}, "--timeout 0s: must be more than 0"},
		{[]string{"status", "--timeout", "0"}, "--timeout 0s: must be more than 0"},
		{[]string{"member", "list", "--timeout", "0s"}, "--timeout 0s: must be more than 0"},
		{[]string{"exec", "q", "--wait", "-1s", "--", "true"}, "--wait -1s: a duration must not be negative"},
		{[]string{"acquire", "q", "--lease", "2h"}, "--lease 2h: must be 10ms..1h"},
		{[]string{"acquire", "q", "--lease", "5ms"}, "--lease 5ms: must be 10ms..1h"},
		{[]string{"renew", "q", "--token", "1", "--lease", "2h"}, "--lease 2h: must be 10ms..1h"},
		{[]string{"acquire", "q", "--lease", "30"}, "--lease"}, // does not parse: the same exit
		{[]string{"release", "q", "--token", "0"}, "--token 0: tokens start at 1"},
		{[]string{"release", "q"}, "--token is required"},
		{[]string{"certs", "init", "--out", t.TempDir(), "--members", "0"}, "--members 0: want 1..1000"},
		{[]string{"certs", "init", "--out", t.TempDir()}, "--members is required"},
		{[]string{"certs", "init", "--members", "3"}, "--out is required"},
	} {
		args := append(tc.args, "--endpoints", nowhere)
		if tc.args[0] == "certs" || tc.args[0] == "exec" {
			args = tc.args
		}
		code, _, stderr := cli(t, args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit %d, one line with %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	// The checker's and the simulator's budgets too, with their own exit
	// code for bad flags (3: the harness failed, never a verdict).
	for _, args := range [][]string{{"check", "h.jsonl", "--timeout", "0s"}, {"sim", "--seed", "1", "--timeout", "-1s"}} {
		if code, _, stderr := cli(t, args...); code != 3 || !strings.Contains(stderr, "--timeout") {
			t.Errorf("%v: exit %d, stderr %q; want exit 3 naming --timeout", args, code, stderr)
		}
	}
}

// acquire --help states the bounds the members enforce, from the
// constants they enforce them with, and so do the README and
// ARCHITECTURE.md.
func TestLimitsAreStatedAsEnforced(t *testing.T) {
	keys := fmt.Sprintf("1..%d bytes", wire.MaxKeyLen)
	maxLease := time.Duration(wire.MaxLeaseMS) * time.Millisecond
	leases := fmt.Sprintf("%v..%gh", time.Duration(wire.MinLeaseMS)*time.Millisecond, maxLease.Hours())
	code, _, help := cli(t, "acquire", "--help")
	if code != 0 || !strings.Contains(help, "KEY is "+keys) || !strings.Contains(help, "--lease is "+leases) {
		t.Errorf("acquire --help: exit %d, does not state keys of %s and leases of %s:\n%s", code, keys, leases, help)
	}
	for _, name := range []string{"README.md", "ARCHITECTURE.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "keys "+keys) || !strings.Contains(string(b), "leases "+leases) {
			t.Errorf("%s does not state keys %s and leases %s", name, keys, leases)
		}
		for _, wrong := range []string{"4 KiB, leases", "100 ms to 1 h"} {
			if strings.Contains(string(b), wrong) {
				t.Errorf("%s still says %q", name, wrong)
			}
		}
	}
}

// get "" --json names the key it refused, as every other failing lock
// call's JSON does.
func TestJSONErrorAlwaysHasKey(t *testing.T) {
	code, out, _ := cli(t, "get", "", "--json", "--endpoints", "127.0.0.1:1")
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitError {
		t.Fatalf("get \"\" --json: exit %d, %q (%v)", code, out, err)
	}
	if key, ok := got["key"]; !ok || key != "" || got["error"] != "invalid-argument" {
		t.Fatalf("get \"\" --json = %s; want key \"\" and error invalid-argument", out)
	}
}

// A call that gets no answer says which flag ran out, not only "context
// deadline exceeded".
func TestTimeoutSaysWhatTimedOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts and never answers, as a hung member
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	code, _, stderr := cli(t, "get", "q", "--timeout", "1500ms", "--endpoints", ln.Addr().String())
	if code != exitError || !strings.HasPrefix(stderr, "raftlock get: no answer within --timeout 1.5s") {
		t.Fatalf("get against a silent member: exit %d, stderr %q", code, stderr)
	}
	code, out, _ := cli(t, "get", "q", "--json", "--timeout", "1s", "--endpoints", ln.Addr().String())
	if code != exitError || !strings.Contains(out, `"message":"no answer within --timeout 1s`) {
		t.Fatalf("get --json against a silent member: exit %d, %q", code, out)
	}
}

// snapshot save into a directory is refused before the cluster is asked.
func TestSnapshotSaveRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := cli(t, "snapshot", "save", dir, "--endpoints", "127.0.0.1:1")
	if code != exitError || !strings.Contains(stderr, dir+" is a directory; give a file name") {
		t.Fatalf("snapshot save DIR: exit %d, stderr %q", code, stderr)
	}
}

// A certificate file that cannot be read is a TLS failure, exit 1, as the
// README's table says; only some of --cert, --key and --ca is usage.
func TestMissingCertificateFileExits1(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.pem")
	code, _, stderr := cli(t, "get", "q", "--cert", missing, "--key", missing, "--ca", missing, "--endpoints", "127.0.0.1:1")
	if code != exitError || !strings.Contains(stderr, "no such file") {
		t.Fatalf("missing --cert file: exit %d, stderr %q; want 1", code, stderr)
	}
	if code, _, _ := cli(t, "get", "q", "--cert", missing, "--endpoints", "127.0.0.1:1"); code != exitUsage {
		t.Fatalf("--cert without --key and --ca: exit %d, want %d", code, exitUsage)
	}
}

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
	"github.com/raftlock/raftlock/internal/syncio"
)

// refusal runs a command that must refuse to start. One that starts
// instead (it would run until Ctrl-C) fails the test rather than hanging
// it; the bound is far above any refusal's few milliseconds.
func refusal(t *testing.T, args ...string) (int, string) {
	t.Helper()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		out, errb := syncio.NewBuffer(), syncio.NewBuffer()
		code := run(args, out, errb)
		done <- result{code, errb.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.stderr
	case <-time.After(time.Minute):
		t.Fatalf("%v started instead of refusing", args)
		return 0, ""
	}
}

// mustNotExist fails the test if path exists.
func mustNotExist(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		entries, _ := os.ReadDir(path)
		t.Errorf("%s left %s behind (%d entries)", what, path, len(entries))
	}
}

// `cluster --nodes N` on a directory holding another size of cluster
// would start members that form no cluster with the old ones: refused,
// naming the size and the flag to use, and nothing is created.
func TestClusterRefusesDataDirectoryOfAnotherSize(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raftlock-data")
	for _, id := range []string{"1", "2", "3"} {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, id, "identity.json"), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ports := []string{"--peer-port", freePort(t), "--client-port", freePort(t), "--http-port", freePort(t)}
	for _, n := range []string{"5", "1"} {
		code, stderr := refusal(t, append([]string{"cluster", "--nodes", n, "--data", dir}, ports...)...)
		want := "raftlock cluster: " + dir + " holds a 3-member cluster; run with --nodes 3, or give another --data\n"
		if code != exitUsage || stderr != want {
			t.Errorf("cluster --nodes %s on a 3-member directory: exit %d, stderr %q; want exit %d, %q", n, code, stderr, exitUsage, want)
		}
	}
	mustNotExist(t, filepath.Join(dir, "4"), "a refused cluster --nodes 5")
}

// A start that fails, whatever the reason, leaves no data directory: a
// later start would take a leftover for a member's.
func TestFailedStartsLeaveNoDataDirectory(t *testing.T) {
	work := t.TempDir()
	peer, client, httpPort := freePort(t), freePort(t), freePort(t)
	loop := func(port string) string { return "127.0.0.1:" + port }

	// An id not in --peers.
	data := filepath.Join(work, "stranger", "4")
	code, stderr := refusal(t, "node", "--id", "4", "--peers", "1="+loop(peer), "--listen", loop(client), "--data", data)
	if code != exitUsage || !strings.Contains(stderr, "--id 4 is not in --peers") {
		t.Errorf("node --id 4 not in --peers: exit %d, stderr %q", code, stderr)
	}
	mustNotExist(t, filepath.Join(work, "stranger"), "node --id 4 not in --peers")

	// cluster with overlapping port ranges (--peer-port on the client
	// port): refused before anything is bound or created.
	data = filepath.Join(work, "overlap")
	code, stderr = refusal(t, "cluster", "--nodes", "3", "--data", data, "--peer-port", client, "--client-port", client, "--http-port", httpPort)
	if code != exitUsage || !strings.Contains(stderr, "overlap") {
		t.Errorf("cluster with overlapping ports: exit %d, stderr %q", code, stderr)
	}
	mustNotExist(t, data, "cluster with overlapping ports")

	// A port another process holds: the client port of cluster member 1,
	// then a member's HTTP port, then its peer port (bound last, by the
	// node itself, after the data directory exists).
	held, err := net.Listen("tcp", loop(client))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	data = filepath.Join(work, "taken")
	code, stderr = refusal(t, "cluster", "--nodes", "1", "--data", data, "--peer-port", peer, "--client-port", client, "--http-port", httpPort)
	if code != exitError || !strings.Contains(stderr, "address already in use") {
		t.Errorf("cluster with a taken port: exit %d, stderr %q", code, stderr)
	}
	mustNotExist(t, data, "cluster with a taken port")

	data = filepath.Join(work, "http", "1")
	code, stderr = refusal(t, "node", "--id", "1", "--peers", "1="+loop(peer), "--listen", loop(httpPort), "--http", loop(client), "--data", data)
	if code != exitError || !strings.Contains(stderr, "listen for HTTP") {
		t.Errorf("node with a taken HTTP port: exit %d, stderr %q", code, stderr)
	}
	mustNotExist(t, filepath.Join(work, "http"), "node with a taken HTTP port")

	data = filepath.Join(work, "peer", "1")
	code, stderr = refusal(t, "node", "--id", "1", "--peers", "1="+loop(client), "--listen", loop(httpPort), "--data", data)
	if code != exitError || !strings.Contains(stderr, "address already in use") {
		t.Errorf("node with a taken peer port: exit %d, stderr %q", code, stderr)
	}
	mustNotExist(t, filepath.Join(work, "peer"), "node with a taken peer port")

	// A directory that existed empty stays, empty.
	data = filepath.Join(work, "empty")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if code, stderr = refusal(t, "node", "--id", "1", "--peers", "1="+loop(client), "--listen", loop(httpPort), "--data", data); code != exitError {
		t.Errorf("node with a taken peer port in an empty directory: exit %d, stderr %q", code, stderr)
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) > 0 {
		t.Errorf("the empty data directory holds %d entries after a failed start (%v)", len(entries), err)
	}
}

// A joiner whose id is already a voter would start, be refused by its
// peers as another incarnation and stay a pre-candidate forever: refused
// at start, as an id the cluster does not have is, with nothing created.
func TestJoinRefusesAnIDThatIsAlreadyAVoter(t *testing.T) {
	eps := startCluster(t)
	data := filepath.Join(t.TempDir(), "2")
	code, stderr := refusal(t, "node", "--id", "2", "--join", eps, "--peer-listen", "127.0.0.1:"+freePort(t),
		"--listen", "127.0.0.1:"+freePort(t), "--data", data)
	if code != exitError || !strings.Contains(stderr, "member 2 is already a voter of the cluster") {
		t.Fatalf("node --id 2 --join, 2 a voter: exit %d, stderr %q", code, stderr)
	}
	mustNotExist(t, data, "a refused joiner")
	// The refusal an unknown id already had.
	code, stderr = refusal(t, "node", "--id", "9", "--join", eps, "--peer-listen", "127.0.0.1:"+freePort(t),
		"--listen", "127.0.0.1:"+freePort(t), "--data", data)
	if code != exitError || !strings.Contains(stderr, "member 9 is not in the cluster's configuration") {
		t.Fatalf("node --id 9 --join, 9 unknown: exit %d, stderr %q", code, stderr)
	}
	mustNotExist(t, data, "a refused joiner")
}

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
// constants they enforce them with, and the key rule, and so does the
// README; ARCHITECTURE.md states the bounds.
func TestLimitsAreStatedAsEnforced(t *testing.T) {
	keys := fmt.Sprintf("1..%d bytes", wire.MaxKeyLen)
	const rule = "of UTF-8 without NUL"
	maxLease := time.Duration(wire.MaxLeaseMS) * time.Millisecond
	leases := fmt.Sprintf("%v..%gh", time.Duration(wire.MinLeaseMS)*time.Millisecond, maxLease.Hours())
	code, _, help := cli(t, "acquire", "--help")
	if code != 0 || !strings.Contains(help, "KEY is "+keys+" "+rule) || !strings.Contains(help, "--lease is "+leases) {
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
		if name == "README.md" && !strings.Contains(string(b), "keys "+keys+" "+rule) {
			t.Errorf("%s does not state the key rule, keys %s %s", name, keys, rule)
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

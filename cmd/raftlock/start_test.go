package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
)

// freePort is one free loopback port, as a flag value.
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	return port
}

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
		var out, errb syncBuffer
		code := run(args, &out, &errb)
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

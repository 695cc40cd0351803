package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Clients this project did not write acquire, renew and release through
// a follower with no leader-following code of their own: Python's
// urllib on the HTTP/JSON API (which does not follow a 307 on a POST) and
// a stock grpcio stub on the gRPC API. The follower relays each call to
// the leader (issue 40). grpcio is Debian's python3-grpcio (make
// python-grpc installs it; CI does): without it that half skips, saying so.
func TestStockClientsThroughAFollower(t *testing.T) {
	startsProcesses(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	bin := buildBinary(t)
	var ranges [4]int
	for i := range ranges {
		ranges[i] = freeRange(t, 3)
	}
	startLocalCluster(t, bin, t.TempDir(), "--peer-port", strconv.Itoa(ranges[0]), "--client-port", strconv.Itoa(ranges[1]),
		"--http-port", strconv.Itoa(ranges[2]), "--api-port", strconv.Itoa(ranges[3]))
	api := func(id int) string { return "127.0.0.1:" + strconv.Itoa(ranges[3]+id-1) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follower := ""
	waitUntil(ctx, t, "a follower that knows the leader", func() bool {
		leader := false
		follower = ""
		for id := 1; id <= 3; id++ {
			switch apiRole(api(id)) {
			case "leader":
				leader = true
			case "follower":
				follower = api(id)
			}
		}
		return leader && follower != ""
	})
	run := func(python, script string, env ...string) {
		t.Helper()
		var out []byte
		var err error
		// A leader may change under the test on a loaded machine: the
		// script's calls are then answered unavailable, and it runs again.
		waitUntil(ctx, t, script+" through follower "+follower, func() bool {
			cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", script), follower, "stock/"+strings.TrimSuffix(script, ".py"))
			cmd.Env = append(os.Environ(), env...)
			out, err = cmd.CombinedOutput()
			if err != nil {
				t.Logf("%s: %v\n%s", script, err, out)
			}
			return err == nil
		})
		if _, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64); err != nil {
			t.Errorf("%s printed %q, want a token", script, out)
		}
	}
	run(py, "stock_urllib.py")

	grpcPython := ""
	for _, p := range []string{py, "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import grpc, google.protobuf").Run() == nil {
			grpcPython = p
			break
		}
	}
	protoc, perr := exec.LookPath("protoc")
	if grpcPython == "" || perr != nil {
		t.Skip("the grpcio half needs python3-grpcio, python3-protobuf and protoc (make python-grpc installs them)")
	}
	gen := t.TempDir()
	if out, err := exec.Command(protoc, "-I", filepath.Join("..", "..", "proto"), "--python_out", gen,
		filepath.Join("..", "..", "proto", "raftlock", "v1", "locks.proto")).CombinedOutput(); err != nil {
		t.Fatalf("protoc --python_out: %v\n%s", err, out)
	}
	run(grpcPython, "stock_grpc.py", "PYTHONPATH="+gen)
}

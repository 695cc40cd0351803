package main

import (
	"os"
	"path/filepath"
	"testing"
)

// benchJSON is what these tests read back from bench.json.
type benchJSON struct {
	TLS  bool `json:"tls"`
	Runs []struct {
		System          string   `json:"system"`
		Ops             int64    `json:"ops"`
		Errors          int64    `json:"errors"`
		EntriesPerFsync *float64 `json:"entries_per_fsync"`
	} `json:"runs"`
}

func readBenchJSON(t *testing.T, dir string) benchJSON {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	return decodeJSON[benchJSON](t, "bench.json", b)
}

// bench --tls starts its cluster with fresh certificates, the members serve
// mutual TLS, and the bench's clients complete ops with a client
// certificate; the metrics (entries per fsync) come over HTTPS.
func TestBenchTLSStartsSecuredCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildBinary(t)
	data, out := t.TempDir(), filepath.Join(t.TempDir(), "results")
	r := runCLI(t, bin, nil, "bench", "--tls", "--clients", "4", "--duration", "1s", "--warmup", "200ms",
		"--data", data, "--out", out)
	if r.code != 0 {
		t.Fatalf("bench --tls: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readBenchJSON(t, out)
	if !rep.TLS || len(rep.Runs) != 1 {
		t.Fatalf("bench.json: tls=%v, %d runs; want tls and one run", rep.TLS, len(rep.Runs))
	}
	x := rep.Runs[0]
	if x.System != "raftlock --tls" || x.Ops == 0 || x.Errors != 0 || x.EntriesPerFsync == nil {
		t.Fatalf("run %+v: want ops, no errors, and metrics scraped over HTTPS", x)
	}
	for _, f := range []string{"ca.pem", "member-1.pem", "member-3-key.pem", "client-bench.pem"} {
		if _, err := os.Stat(filepath.Join(data, "tls", f)); err != nil {
			t.Errorf("certificate files: %v", err)
		}
	}
}

// bench --endpoints against a running secured cluster: the client's
// certificate, key and CA come from RAFTLOCK_CERT/KEY/CA (and the
// endpoints from RAFTLOCK_ENDPOINTS), as for every other command.
func TestBenchEndpointsWithClientCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	tc := newTLSCluster(t, "")
	out := filepath.Join(t.TempDir(), "results")
	r := runCLI(t, tc.bin, tc.as("admin"), "bench", "--clients", "4", "--duration", "1s", "--warmup", "200ms", "--out", out)
	if r.code != 0 {
		t.Fatalf("bench --endpoints with certificates: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readBenchJSON(t, out)
	if !rep.TLS || len(rep.Runs) != 1 || rep.Runs[0].Ops == 0 || rep.Runs[0].Errors != 0 {
		t.Fatalf("bench.json: %+v; want tls and a run that completed ops", rep)
	}
}

// --tls starts a cluster; it does not mix with --endpoints, and client
// certificates without --endpoints would be silently unused.
func TestBenchTLSFlagsAreCheckedFirst(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--tls", "--endpoints", "127.0.0.1:1"},
		{"bench", "--cert", "c.pem", "--key", "k.pem", "--ca", "ca.pem"},
	} {
		if code, _, stderr := cli(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, stderr)
		}
	}
}

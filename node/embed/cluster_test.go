package embed

import (
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPortRanges(t *testing.T) {
	ok := []PortRange{{"--peer-port", 7001}, {"--client-port", 8001}, {"--http-port", 9001}}
	if err := CheckPortRanges(ok, 9); err != nil {
		t.Fatal(err)
	}
	err := CheckPortRanges([]PortRange{{"--peer-port", 7001}, {"--client-port", 7003}}, 3)
	if err == nil || !strings.Contains(err.Error(), "--peer-port 7001 and --client-port 7003 overlap") {
		t.Fatalf("overlap: %v", err)
	}
	if err := CheckPortRanges([]PortRange{{"--http-port", 65534}}, 3); err == nil || !strings.Contains(err.Error(), "must lie in 1..65535") {
		t.Fatalf("out of range: %v", err)
	}
}

// raftlock cluster serves the API on 10001.. unless --api-port 0, and
// each member announces its API address to the others (default --api,
// else --advertise-api).
func TestLocalClusterAPIPorts(t *testing.T) {
	var l LocalFlags
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	l.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got := l.ports(); len(got) != 4 || got[3] != (PortRange{"--api-port", 10001}) || got[3].Addr(3) != "127.0.0.1:10003" {
		t.Errorf("default ports %v, want the API's 10001..", got)
	}
	if err := fs.Parse([]string{"--api-port", "0"}); err != nil {
		t.Fatal(err)
	}
	if got := l.ports(); len(got) != 3 {
		t.Errorf("--api-port 0: ports %v, want none for the API", got)
	}

	var f Flags
	fs = flag.NewFlagSet("node", flag.ContinueOnError)
	f.RegisterFlags(fs)
	if err := fs.Parse([]string{"--api", "0.0.0.0:10001", "--advertise-api", "h1:10001"}); err != nil {
		t.Fatal(err)
	}
	if f.Config.API != "0.0.0.0:10001" || f.Config.AdvertiseAPI != "h1:10001" {
		t.Errorf("--api, --advertise-api set %q, %q", f.Config.API, f.Config.AdvertiseAPI)
	}
	mb := &Member{cfg: f.Config, log: slog.New(slog.DiscardHandler)}
	if _, err := mb.loadSecurity(); err == nil || !strings.Contains(err.Error(), "0.0.0.0:10001") {
		t.Errorf("an API on every interface without TLS: %v", err)
	}
}

// A local cluster's size counts the member directories that hold data;
// a member that fails to start undoes everything the start created.
func TestStartLocalUndoesAFailedStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	if n, err := LocalSize(dir); n != 0 || err != nil {
		t.Fatalf("LocalSize of a missing directory = %d, %v", n, err)
	}
	fail := errors.New("refused")
	_, err := StartLocal(dir, 3, func(int) (Config, error) { return Config{}, fail }, nil)
	if !errors.Is(err, fail) || !strings.HasPrefix(err.Error(), "member 1: ") {
		t.Fatalf("StartLocal = %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed start left %s: %v", dir, err)
	}
	for _, id := range []string{"1", "2", "x"} {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "2", "data"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "x", "data"), nil, 0o644)
	if n, err := LocalSize(dir); n != 1 || err != nil {
		t.Fatalf("LocalSize = %d, %v; want 1 (only member 2 holds data)", n, err)
	}
}

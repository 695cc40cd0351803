package embed

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/cliflag"
)

func parseFlags(t *testing.T, args ...string) *Flags {
	t.Helper()
	var f Flags
	if _, err := cliflag.Parse(&f, "node", args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return &f
}

func wantUsage(t *testing.T, what string, err error, want string) {
	t.Helper()
	var ce *cliflag.Error
	if !errors.As(err, &ce) || ce.Code != cliflag.ExitUsage || err.Error() != want {
		t.Errorf("%s: %v, want the usage error %q", what, err, want)
	}
}

// Bad flags are usage errors, each naming its flag, before anything starts.
func TestFlagsRefusedAsUsageErrors(t *testing.T) {
	data := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := []string{"--id", "1", "--data", data}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", data, "--peers", "1=a:1"}, "--id is required"},
		{[]string{"--id", "1", "--peers", "1=a:1"}, "--data is required"},
		{append(base, "--peers", "2=a:1,3=a:2"), "--id 1 is not in --peers (members 2 3)"},
		{append(base, "--peers", "1=a:1", "--cert", "c"), "TLS needs --cert, --key and --ca together; missing [--key --ca]"},
		{append(base, "--peers", "1=a:1", "--unsafe-bug", "x"), "--unsafe-bug needs --fault-injection"},
		{append(base, "--peers", "1=a:1", "--max-keys", "0"), "--max-keys must be > 0, got 0"},
		{append(base, "--peers", "1=a:1", "--peer-frame-limit", "10"), "--peer-frame-limit 10 is below 65536: peer streams would close on ordinary appends (keep it above 1 MiB outside tests)"},
		{append(base, "--peers", "1=a:1", "--snapshot-chunk-size", "0"), "--snapshot-chunk-size 0 must be > 0"},
		{append(base, "--peers", "1=a:1", "--cluster-id", "zz"), "--cluster-id: "},
		{append(base, "--join", "a:1", "--peers", "1=a:1"), "--join and --peers exclude each other: --peers bootstraps a new cluster, --join enters a running one"},
		{append(base, "--join", "bad"), `--join: bad endpoint "bad" in --endpoints: want HOST:PORT`},
		{append(base, "--peers", "1=a:1", "--listen", "notanaddr"), `bad --listen "notanaddr": want HOST:PORT`},
		{append(base, "--peers", "1=a:1", "--http", "a:99999"), `bad --http "a:99999": want HOST:PORT`},
		{append(base, "--peers", "1=a:1", "--api", "a:b"), `bad --api "a:b": want HOST:PORT`},
		{append(base, "--peers", "1=a:1", "--peer-listen", "a"), `bad --peer-listen "a": want HOST:PORT`},
	} {
		f := parseFlags(t, tc.args...)
		peers, join, err := f.Peers(context.Background(), log)
		if err == nil {
			_, err = f.MemberConfig(peers, join)
		}
		if strings.HasSuffix(tc.want, ": ") && err != nil && strings.HasPrefix(err.Error(), tc.want) {
			continue // the rest is the parser's own words
		}
		wantUsage(t, strings.Join(tc.args, " "), err, tc.want)
	}
	f := parseFlags(t, "--log-format", "xml")
	_, err := f.Logger(io.Discard)
	wantUsage(t, "--log-format xml", err, `bad --log-format "xml": want text or json`)
}

// The defaults of a member's tuning are the node's own, and a valid set
// of flags becomes the member's Config whole.
func TestMemberConfigFromFlags(t *testing.T) {
	f := parseFlags(t, "--id", "2", "--data", t.TempDir(), "--peers", "1=a:1,2=a:2", "--max-keys", "7", "--cluster-id", "00000000000000ff", "--debug")
	peers, join, err := f.Peers(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.MemberConfig(peers, join)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.ID != 2 || len(cfg.Node.Peers) != 2 || cfg.Node.Limits.MaxKeys != 7 || cfg.Node.ClusterID != 0xff || !cfg.Debug || cfg.Listen != "127.0.0.1:8001" {
		t.Fatalf("config %+v", cfg)
	}
	if cfg.Node.TickInterval == 0 || cfg.Node.SnapshotEvery == 0 || cfg.Limits.MaxConns == 0 {
		t.Fatalf("tuning defaults not filled: %+v", cfg.Node)
	}
}

func TestLocalAndRestoreFlagsRefusals(t *testing.T) {
	wantUsage(t, "--nodes 0", (&LocalFlags{Nodes: 0, Dir: "d"}).Check(), "--nodes must be 1..9")
	wantUsage(t, "--data ''", (&LocalFlags{Nodes: 3}).Check(), "--data must name a directory")
	l := LocalFlags{Nodes: 3, Dir: t.TempDir(), PeerPort: 7001, ClientPort: 7002, HTTPPort: 9001}
	_, _, err := l.Start(slog.New(slog.DiscardHandler))
	wantUsage(t, "overlapping ports", err, "--peer-port 7001 and --client-port 7002 overlap: with --nodes 3 they use 7001..7003 and 7002..7004; move one")

	dir := filepath.Join(t.TempDir(), "m1")
	for _, tc := range []struct {
		r    RestoreFlags
		want string
	}{
		{RestoreFlags{ID: 1, peers: "1=a:1"}, "--data is required"},
		{RestoreFlags{Dir: dir, peers: "1=a:1"}, "--id is required"},
		{RestoreFlags{Dir: dir, ID: 1}, "--peers is required"},
		{RestoreFlags{Dir: dir, ID: 3, peers: "1=a:1"}, "--id 3 is not in --peers"},
	} {
		_, _, err := tc.r.Restore("backup")
		wantUsage(t, tc.want, err, tc.want)
	}
}

// The banner of raftlock cluster names where everything is: the client
// endpoints, the metrics, the console, and the API when it is served.
func TestClusterSummaryNamesConsoleAndAPI(t *testing.T) {
	l := LocalFlags{Nodes: 3, Dir: "d", PeerPort: 7001, ClientPort: 8001, HTTPPort: 9001, APIPort: 10001}
	var b strings.Builder
	l.WriteSummary(&b, false)
	for _, want := range []string{"endpoints: 127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003\n",
		"console:   http://127.0.0.1:9001/", "api:       http://127.0.0.1:10001 (HTTP/JSON and gRPC; 10001..10003)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	l.APIPort = 0
	b.Reset()
	l.WriteSummary(&b, false)
	if strings.Contains(b.String(), "api:") {
		t.Errorf("summary names an API that is not served:\n%s", b.String())
	}
}

// gRPC reflection is on by default for raftlock node's and raftlock
// cluster's members alike, and --grpc-reflection=false turns it off (the
// cluster's members once had it off: the flag was registered for node
// only, and its zero value meant off).
func TestGRPCReflectionOnByDefaultForEveryMember(t *testing.T) {
	peers := map[uint64]string{1: "127.0.0.1:7001"}
	for _, tc := range []struct {
		args []string
		off  bool
	}{{nil, false}, {[]string{"--grpc-reflection=false"}, true}} {
		var node Flags
		nfs := flag.NewFlagSet("node", flag.ContinueOnError)
		node.RegisterFlags(nfs)
		var local LocalFlags
		lfs := flag.NewFlagSet("cluster", flag.ContinueOnError)
		local.RegisterFlags(lfs)
		for name, fs := range map[string]*flag.FlagSet{"node": nfs, "cluster": lfs} {
			args := append([]string{}, tc.args...)
			if name == "node" {
				args = append(args, "--id", "1", "--data", t.TempDir())
			}
			if err := fs.Parse(args); err != nil {
				t.Fatalf("%s %v: %v", name, args, err)
			}
		}
		local.Flags.Config.Node.ID, local.Flags.Config.Node.DataDir = 1, t.TempDir()
		for name, f := range map[string]*Flags{"node": &node, "cluster": &local.Flags} {
			cfg, err := f.MemberConfig(peers, nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if cfg.NoGRPCReflection != tc.off {
				t.Errorf("%s %v: reflection off %v, want %v", name, tc.args, cfg.NoGRPCReflection, tc.off)
			}
		}
	}
}

package chaos

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/cliflag"
)

// The run length is --duration in chaos as in bench; --time, its old
// name, still sets it so that scripts keep working; the fault schedule's
// knobs are --fault-interval and --fault-duration.
func TestTimeIsAnAliasOfDuration(t *testing.T) {
	parse := func(args ...string) *Flags {
		var f Flags
		if _, err := cliflag.Parse(&f, "chaos", args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return &f
	}
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 30 * time.Second},
		{[]string{"--duration", "9s"}, 9 * time.Second},
		{[]string{"--time", "7s"}, 7 * time.Second},
	} {
		if got := parse(tc.args...).Config.Time; got != tc.want {
			t.Errorf("%v: run length %v, want %v", tc.args, got, tc.want)
		}
	}
	f := parse("--fault-interval", "4s", "--fault-duration", "1s", "--seed", "12")
	if f.Config.FaultInterval != 4*time.Second || f.Config.FaultDuration != time.Second || f.Seed.Value() != 12 {
		t.Errorf("fault interval %v, duration %v, seed %d; want 4s, 1s, 12", f.Config.FaultInterval, f.Config.FaultDuration, f.Seed.Value())
	}
}

// Prepare checks every flag before it touches the disk, and gives a run
// its defaults: the families of Families, a report directory named after
// the seed, this executable.
func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var f Flags
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	f.RegisterFlags(fs)
	if err := fs.Parse([]string{"--nodes", "4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Prepare(); err == nil || err.Error() != "--nodes must be 3 or 5" {
		t.Fatalf("Prepare with --nodes 4: %v", err)
	}
	if err := fs.Parse([]string{"--nodes", "3", "--seed", "7", "--nemesis", "kill,pause"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Seed != 7 || cfg.Out != "chaos-out/seed-7" || cfg.Bin == "" || len(cfg.Nemeses) != 2 {
		t.Fatalf("prepared %+v", cfg)
	}
}

// With held locks the members snapshot by entries in small chunks under a
// frame limit above raft's largest append, unless the flags say otherwise;
// without, the members keep their defaults.
func TestTransferSettings(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want Transfer
	}{
		{Config{}, Transfer{}},
		{Config{SnapshotChunkSize: 4096}, Transfer{ChunkSize: 4096}},
		{Config{Held: 10}, Transfer{ChunkSize: heldChunkSize, FrameLimit: heldFrameLimit, ByEntries: true}},
		{Config{Held: 10, SnapshotChunkSize: 1 << 20, PeerFrameLimit: 8 << 20}, Transfer{ChunkSize: 1 << 20, FrameLimit: 8 << 20, ByEntries: true}},
	} {
		if got := tc.cfg.Transfer(); got != tc.want {
			t.Errorf("%+v: %+v, want %+v", tc.cfg, got, tc.want)
		}
	}
	if heldFrameLimit < minPeerFrameLimit {
		t.Fatalf("the held runs' frame limit %d is under the least the harness accepts, %d", heldFrameLimit, minPeerFrameLimit)
	}
	base := Config{Nodes: 3, Clients: 1, Keys: 1, Time: time.Second, LeaseMin: time.Second, LeaseMax: time.Second,
		FaultInterval: time.Second, FaultDuration: time.Second, SnapshotEvery: 100}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Held = -1 },
		func(c *Config) { c.Held, c.KeySize = 1, 0 },
		func(c *Config) { c.Held, c.KeySize = 1, 257 },
		func(c *Config) { c.PeerFrameLimit = 256 << 10 },
	} {
		c := base
		bad(&c)
		if c.Validate() == nil {
			t.Errorf("%+v was accepted", c)
		}
	}
	if c := base; c.Validate() != nil {
		t.Errorf("a run without held locks needs no key size: %v", c.Validate())
	}
	if k := heldKey(7, 250); len(k) != 250 || !strings.HasPrefix(k, heldPrefix) {
		t.Errorf("held key %q: %d bytes", k, len(k))
	}
}

// --pin-members keeps API clients to one member each: it needs an API
// protocol, and is refused without one before anything runs.
func TestPinMembersNeedsAnAPIProtocol(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--pin-members"}, false},
		{[]string{"--pin-members", "--protocols", "binary"}, false},
		{[]string{"--pin-members", "--protocols", "http,grpc"}, true},
	} {
		var f Flags
		fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
		f.RegisterFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		_, err := f.Prepare()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "--pin-members")) {
			t.Errorf("%v: %v (want ok %v)", tc.args, err, tc.ok)
		}
	}
}

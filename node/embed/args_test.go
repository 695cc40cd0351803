package embed

import (
	"slices"
	"testing"

	"github.com/raftlock/raftlock/internal/tlsconfig"
)

func TestArgsSpellRaftlockNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    Args
		want []string
	}{
		{"bootstrap", Args{ID: 2, Peers: map[uint64]string{2: "h:2", 1: "h:1"}, Listen: "c:2", Data: "d",
			TLS: tlsconfig.Files{Cert: "m.pem", Key: "k.pem", CA: "ca.pem"}, SnapshotEvery: 50, NoBatch: true, MaxUncommitted: -1},
			[]string{"node", "--id", "2", "--peers", "1=h:1,2=h:2", "--listen", "c:2", "--data", "d",
				"--cert", "m.pem", "--key", "k.pem", "--ca", "ca.pem", "--snapshot-every", "50", "--max-uncommitted", "-1", "--no-batch"}},
		{"join", Args{ID: 4, Join: []string{"c:1", "c:2"}, PeerListen: "p:4", HTTP: "w:4", FaultInjection: true, LogLevel: "info",
			Extra: []string{"--unsafe-bug", "early-expire"}},
			[]string{"node", "--id", "4", "--join", "c:1,c:2", "--peer-listen", "p:4", "--http", "w:4",
				"--log-level", "info", "--fault-injection", "--unsafe-bug", "early-expire"}},
		{"api", Args{ID: 1, Peers: map[uint64]string{1: "h:1"}, HTTP: "w:1", API: "a:1"},
			[]string{"node", "--id", "1", "--peers", "1=h:1", "--http", "w:1", "--api", "a:1"}},
	} {
		if got := tc.a.Argv(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Argv() =\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
}

func TestParsePeersReadsWhatFormatPeersWrites(t *testing.T) {
	peers := map[uint64]string{1: "h:1", 3: "h:3"}
	got, err := ParsePeers(FormatPeers(peers))
	if err != nil || len(got) != 2 || got[1] != "h:1" || got[3] != "h:3" {
		t.Fatalf("ParsePeers(FormatPeers) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0=h:1", "1=", "x=h:1", "1=h:1,1=h:2"} {
		if _, err := ParsePeers(bad); err == nil {
			t.Errorf("ParsePeers(%q) took it", bad)
		}
	}
}

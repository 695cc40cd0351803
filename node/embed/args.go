package embed

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/raftlock/raftlock/internal/tlsconfig"
)

// Args are the settings of one `raftlock node` process, as the chaos
// harness, the benchmark and the tests start one; Argv spells them as its
// command line, the one place that does. Zero fields are left out, so the
// member takes its own defaults.
type Args struct {
	ID uint64
	// Peers bootstraps a new cluster (--peers); Join, the client
	// endpoints of a running one, makes the member join it instead.
	Peers     map[uint64]string
	Join      []string
	ClusterID string // --cluster-id, 16 hex digits

	PeerListen, Listen, HTTP, Data string
	API                            string // --api ("": none)

	TLS            tlsconfig.Files
	FaultInjection bool
	LogLevel       string

	TickInterval                  string // a duration as --tick takes it
	SnapshotEvery, SnapshotKeep   uint64
	SnapshotByEntries             bool
	SnapshotChunkSize             int
	PeerFrameLimit                int
	MaxInflight, MaxUncommitted   int
	MaxKeys                       int
	NoBatch, NoHandoff, NoOverlap bool
	// Extra are further flags, given last (such as --unsafe-bug NAME).
	Extra []string
}

// Argv is the command line after the executable's name: "node" and the
// flags.
func (a Args) Argv() []string {
	num := func(v int64) string {
		if v == 0 {
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	args := []string{"node", "--id", strconv.FormatUint(a.ID, 10)}
	for _, f := range [][2]string{
		{"--peers", FormatPeers(a.Peers)}, {"--join", strings.Join(a.Join, ",")}, {"--cluster-id", a.ClusterID},
		{"--peer-listen", a.PeerListen}, {"--listen", a.Listen}, {"--http", a.HTTP}, {"--api", a.API}, {"--data", a.Data},
		{"--cert", a.TLS.Cert}, {"--key", a.TLS.Key}, {"--ca", a.TLS.CA}, {"--log-level", a.LogLevel},
		{"--tick", a.TickInterval}, {"--snapshot-every", num(int64(a.SnapshotEvery))}, {"--snapshot-keep", num(int64(a.SnapshotKeep))},
		{"--snapshot-chunk-size", num(int64(a.SnapshotChunkSize))}, {"--peer-frame-limit", num(int64(a.PeerFrameLimit))},
		{"--max-inflight", num(int64(a.MaxInflight))}, {"--max-uncommitted", num(int64(a.MaxUncommitted))}, {"--max-keys", num(int64(a.MaxKeys))},
	} {
		if f[1] != "" {
			args = append(args, f[0], f[1])
		}
	}
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"--fault-injection", a.FaultInjection}, {"--snapshot-by-entries", a.SnapshotByEntries},
		{"--no-batch", a.NoBatch}, {"--no-handoff", a.NoHandoff}, {"--no-write-overlap", a.NoOverlap},
	} {
		if f.on {
			args = append(args, f.name)
		}
	}
	return append(args, a.Extra...)
}

// FormatPeers spells peers as --peers takes them: ID=HOST:PORT,... in id
// order.
func FormatPeers(peers map[uint64]string) string {
	var list []string
	for _, id := range slices.Sorted(maps.Keys(peers)) {
		list = append(list, fmt.Sprintf("%d=%s", id, peers[id]))
	}
	return strings.Join(list, ",")
}

// ParsePeers reads peers as --peers spells them (FormatPeers): ID=HOST:PORT,
// with ids above 0, each once.
func ParsePeers(s string) (map[uint64]string, error) {
	peers := map[uint64]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		idStr, addr, ok := strings.Cut(part, "=")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if !ok || err != nil || id == 0 || addr == "" {
			return nil, fmt.Errorf("bad peer %q: want ID=HOST:PORT with ID > 0", part)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("peer %d listed twice", id)
		}
		peers[id] = addr
	}
	if len(peers) == 0 {
		return nil, errors.New("no peers")
	}
	return peers, nil
}

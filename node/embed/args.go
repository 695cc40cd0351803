package embed

import (
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
	args := []string{"node", "--id", strconv.FormatUint(a.ID, 10)}
	str := func(flag, v string) {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	num := func(flag string, v int64) {
		if v != 0 {
			args = append(args, flag, strconv.FormatInt(v, 10))
		}
	}
	on := func(flag string, v bool) {
		if v {
			args = append(args, flag)
		}
	}
	if len(a.Peers) > 0 {
		var peers []string
		for _, id := range slices.Sorted(maps.Keys(a.Peers)) {
			peers = append(peers, fmt.Sprintf("%d=%s", id, a.Peers[id]))
		}
		str("--peers", strings.Join(peers, ","))
	}
	str("--join", strings.Join(a.Join, ","))
	str("--cluster-id", a.ClusterID)
	str("--peer-listen", a.PeerListen)
	str("--listen", a.Listen)
	str("--http", a.HTTP)
	str("--data", a.Data)
	str("--cert", a.TLS.Cert)
	str("--key", a.TLS.Key)
	str("--ca", a.TLS.CA)
	on("--fault-injection", a.FaultInjection)
	str("--log-level", a.LogLevel)
	str("--tick", a.TickInterval)
	num("--snapshot-every", int64(a.SnapshotEvery))
	num("--snapshot-keep", int64(a.SnapshotKeep))
	num("--snapshot-chunk-size", int64(a.SnapshotChunkSize))
	num("--peer-frame-limit", int64(a.PeerFrameLimit))
	on("--snapshot-by-entries", a.SnapshotByEntries)
	on("--no-batch", a.NoBatch)
	on("--no-handoff", a.NoHandoff)
	on("--no-write-overlap", a.NoOverlap)
	num("--max-inflight", int64(a.MaxInflight))
	num("--max-uncommitted", int64(a.MaxUncommitted))
	num("--max-keys", int64(a.MaxKeys))
	return append(args, a.Extra...)
}

package embed

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// DefaultBumpTokens is how far a restore raises the last token: above any
// realistic number of grants between a backup and the disaster it is
// restored after (etcd's snapshot restore asks for the same with
// --bump-revision), and a negligible part of the 64-bit token space.
const DefaultBumpTokens = 1_000_000

// RestoreFlags are raftlock snapshot restore's flags: the new member's
// data directory, id and peers, and how far the tokens jump.
type RestoreFlags struct {
	Dir   string
	ID    uint64
	peers string
	Peers map[uint64]string // parsed by Restore
	Bump  uint64
}

// RegisterFlags defines raftlock snapshot restore's flags on fs.
func (r *RestoreFlags) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&r.Dir, "data", "", "data directory to create for this member (required; must not exist or be empty)")
	fs.StringVar(&r.Dir, "dir", "", "alias of --data")
	fs.Uint64Var(&r.ID, "id", 0, "this member's id, one of --peers (required)")
	fs.StringVar(&r.peers, "peers", "", "every member's raft address in the new cluster: 1=HOST:PORT,2=... (required)")
	fs.Uint64Var(&r.Bump, "bump-tokens", DefaultBumpTokens, "raise the last token by this many, above any the old cluster granted after the backup")
}

// Restore seeds the member's data directory from the backup file
// (member.EncodeBackup's format) with node.SeedFromBackup, once its flags
// are checked (usage errors). start is the raftlock node command line
// that starts the member.
func (r *RestoreFlags) Restore(file string) (meta member.BackupMeta, start string, err error) {
	switch {
	case r.Dir == "":
		return meta, "", cliflag.Usagef("--data is required")
	case r.ID == 0:
		return meta, "", cliflag.Usagef("--id is required")
	case r.peers == "":
		return meta, "", cliflag.Usagef("--peers is required")
	}
	if r.Peers, err = ParsePeers(r.peers); err != nil {
		return meta, "", cliflag.Usagef("--peers: %v", err)
	}
	if _, ok := r.Peers[r.ID]; !ok {
		return meta, "", cliflag.Usagef("--id %d is not in --peers", r.ID)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return meta, "", err
	}
	meta, table, _, err := member.DecodeBackup(data)
	if err != nil {
		return meta, "", fmt.Errorf("%s: %w", file, err)
	}
	if err := node.SeedFromBackup(r.Dir, r.ID, r.Peers, meta.Index, meta.Term, table, r.Bump, nil); err != nil {
		return meta, "", err
	}
	a := Args{ID: r.ID, Peers: r.Peers, Data: r.Dir}
	return meta, "raftlock " + strings.Join(a.Argv(), " "), nil
}

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node/logstore"
)

// Backup is the lock table at one applied index, as the leader read it.
type Backup struct {
	Index, Term uint64
	Table       []byte // fsm.Machine.Snapshot
}

// Backup reads the lock table at an applied index of the leader, with the
// index and its term. The leader answers only once a quorum confirmed it
// still leads and it applied up to the read index, as for a linearizable
// Get, so the table holds every lock call the cluster acknowledged before
// this one began. A follower answers NotLeaderError naming the leader,
// which the client protocol turns into a redirect; a leader that cannot
// confirm its leadership answers ErrUnavailable.
func (n *Node) Backup(ctx context.Context) (Backup, error) {
	a, err := n.call(ctx, member.Request{Op: member.OpBackup})
	if err != nil {
		return Backup{}, err
	}
	// Encoded here, not on the member's goroutine: the table may be big.
	return Backup{Index: a.Backup.Index, Term: a.Backup.Term, Table: a.Backup.Table.Snapshot()}, nil
}

// SeedFromBackup writes a new data directory dir for member id of a
// cluster of peers (id to raft address) restored from a backup: a log
// store whose snapshot is the table at the backup's index and term, with
// every peer a voter and the address book made of peers, and a hard state
// that commits it, so raft starts consistent. The members' leases restart
// in full when they start (rule 6), and the table keeps the last token
// raised by skipTokens, so the next grant's token is above every one in
// the backup and every one the old cluster may have issued after it, up to
// skipTokens grants (rule 1: a token is never issued twice, which a fenced
// resource that has seen the old cluster's tokens relies on).
//
// dir must not exist or be empty: a member never bootstraps twice.
func SeedFromBackup(dir string, id uint64, peers map[uint64]string, index, term uint64, table []byte, skipTokens uint64, log *slog.Logger) error {
	if _, ok := peers[id]; !ok {
		return fmt.Errorf("member %d is not in the peers", id)
	}
	if index == 0 || term == 0 {
		return fmt.Errorf("backup at index %d term %d: both must be > 0", index, term)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := fsm.Restore(table)
	if err != nil {
		return fmt.Errorf("backup table: %w", err)
	}
	if err := m.SkipTokens(skipTokens); err != nil {
		return err
	}
	table = m.Snapshot()
	entries, err := os.ReadDir(dir)
	switch {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("data directory %s already holds data: restore only into a new or empty directory", dir)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	}
	created := errors.Is(err, os.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := seed(dir, peers, index, term, table, log); err != nil {
		if created {
			os.RemoveAll(dir)
		}
		return err
	}
	return nil
}

func seed(dir string, peers map[uint64]string, index, term uint64, table []byte, log *slog.Logger) error {
	voters := make([]uint64, 0, len(peers))
	for p := range peers {
		voters = append(voters, p)
	}
	slices.Sort(voters)
	snap := &raftpb.Snapshot{
		Data: member.EncodeSnapshot(table, member.NewBook(peers)),
		Metadata: &raftpb.SnapshotMetadata{
			ConfState: &raftpb.ConfState{Voters: voters},
			Index:     new(index), Term: new(term),
		},
	}
	// OpenSeeded writes the snapshot and the hard state that commits it
	// in one synced batch.
	st, err := logstore.OpenSeeded(dir, vfs.Default, snap, log)
	if err != nil {
		return err
	}
	return st.Close()
}

package node

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/member"
)

// CommittedLog replays this member's applied log through a fresh state
// machine (from its snapshot, if the log was compacted) and returns every
// command with its result. complete is false when a snapshot replaced the
// log's beginning: commands before it are then not listed.
//
// With an audit journal the commands come from it instead, and the log
// is complete when this member applied every entry itself (it installed no
// snapshot from the leader), however often it compacted its log.
func (n *Node) CommittedLog(ctx context.Context) (cmds []LoggedCommand, complete bool, err error) {
	applied, err := n.appliedIndex(ctx)
	if err != nil {
		return nil, false, err
	}
	if n.journal != nil {
		return readJournal(n.journal.path, applied)
	}
	snap, err := n.storage.Snapshot()
	if err != nil {
		return nil, false, err
	}
	data := snap.GetData()
	if r, ok := n.storage.(member.SnapshotReader); ok {
		if data, err = r.SnapshotData(data); err != nil {
			return nil, false, err
		}
	}
	m, _, _, err := member.DecodeSnapshot(data)
	if err != nil {
		return nil, false, fmt.Errorf("restore snapshot: %w", err)
	}
	first, err := n.storage.FirstIndex()
	if err != nil {
		return nil, false, err
	}
	if first > snap.GetMetadata().GetIndex()+1 {
		return nil, false, errors.New("log compacted past the snapshot")
	}
	var ents []*raftpb.Entry
	if applied >= first {
		if ents, err = n.storage.Entries(first, applied+1, 1<<62); err != nil {
			return nil, false, fmt.Errorf("read log %d..%d: %w", first, applied, err)
		}
	}
	for _, e := range ents {
		if e.GetType() != raftpb.EntryType_EntryNormal || len(e.GetData()) == 0 {
			continue
		}
		envs, err := fsm.DecodeBatch(e.GetData())
		if err != nil {
			continue // skipped at apply on every member too
		}
		for _, env := range envs {
			cmds = append(cmds, member.NewLoggedCommand(e.GetIndex(), e.GetTerm(), env, m.Apply(env.Cmd)))
		}
	}
	return cmds, snap.GetMetadata().GetIndex() == 0, nil
}

package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
)

// FetchBackup pulls one capture of the leader's table (snapshot.save) and
// checks it. A capture lost midway (the leader changed, or it expired) is
// started again, twice at most.
func FetchBackup(ctx context.Context, cl *client.Client) (member.BackupMeta, []byte, error) {
	var lastErr error
	for range 3 {
		meta, table, err := fetchCapture(ctx, cl)
		if errors.Is(err, client.ErrUnknownCapture) {
			lastErr = err
			continue
		}
		return meta, table, err
	}
	return member.BackupMeta{}, nil, lastErr
}

// fetchCapture reads one capture chunk by chunk and checks its sum and
// its encoding.
func fetchCapture(ctx context.Context, cl *client.Client) (member.BackupMeta, []byte, error) {
	var first SnapshotSaveAnswer
	if err := cl.Admin(ctx, wire.AdminSnapshotSave, nil, &first, true); err != nil {
		return member.BackupMeta{}, nil, err
	}
	meta := first.Meta
	if meta.Size < 0 || meta.Size > 1<<34 {
		return member.BackupMeta{}, nil, fmt.Errorf("the leader announced a snapshot of %d bytes", meta.Size)
	}
	table := make([]byte, 0, meta.Size)
	for int64(len(table)) < meta.Size {
		var a SnapshotSaveAnswer
		args := SnapshotSaveArgs{Capture: first.Capture, Offset: int64(len(table))}
		if err := cl.Admin(ctx, wire.AdminSnapshotSave, args, &a, true); err != nil {
			return member.BackupMeta{}, nil, err
		}
		if a.Meta != meta || a.Offset != int64(len(table)) || len(a.Data) == 0 || int64(len(table)+len(a.Data)) > meta.Size {
			return member.BackupMeta{}, nil, fmt.Errorf("snapshot capture %s: a chunk that does not fit (offset %d, %d bytes)", first.Capture, a.Offset, len(a.Data))
		}
		table = append(table, a.Data...)
	}
	sum := sha256.Sum256(table)
	if hex.EncodeToString(sum[:]) != meta.SHA256 {
		return member.BackupMeta{}, nil, fmt.Errorf("snapshot received with sha256 %x, the leader announced %s", sum, meta.SHA256)
	}
	// The file must decode as restore will read it.
	if _, _, _, err := member.DecodeBackup(member.EncodeBackup(meta, table)); err != nil {
		return member.BackupMeta{}, nil, err
	}
	return meta, table, nil
}

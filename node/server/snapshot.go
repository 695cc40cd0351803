package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// snapshot.save streams a backup of the lock table from the leader in
// pieces that fit the client protocol's frames:
//
//   - {} (no capture): the leader reads the table at its applied index
//     (node.Backup) and keeps it as a capture; the answer is the capture's
//     id and the backup metadata (index, term, locks, last token, size,
//     SHA-256), no data.
//   - {"capture": ID, "offset": N}: the answer is the metadata again and
//     up to SnapshotChunk bytes of the table from offset N (base64 in the
//     JSON). A member that does not hold the capture and is not the leader
//     redirects to the leader; the leader answers invalid argument
//     (wire.ReasonUnknownCapture) once it has dropped it, or after a
//     change of leader: the caller starts again.
//
// A member keeps at most maxCaptures captures, each until a minute after
// it was last read.
const (
	SnapshotChunk = 32 << 10
	maxCaptures   = 4
	captureTTL    = time.Minute
)

// SnapshotSaveArgs are snapshot.save's arguments.
type SnapshotSaveArgs struct {
	Capture string `json:"capture,omitempty"`
	Offset  int64  `json:"offset,omitempty"`
}

// SnapshotSaveAnswer is snapshot.save's answer.
type SnapshotSaveAnswer struct {
	Capture string            `json:"capture"`
	Meta    member.BackupMeta `json:"meta"`
	Offset  int64             `json:"offset"`
	Data    []byte            `json:"data,omitempty"`
}

// captureCache holds the captures of one Server; the zero value is empty.
type captureCache struct {
	mu   sync.Mutex
	byID map[string]*capture
}

type capture struct {
	meta     member.BackupMeta
	table    []byte
	lastUsed time.Time
}

func snapshotSave(ctx context.Context, s *Server, body []byte) (any, error) {
	n := s.node
	var args SnapshotSaveArgs
	if err := decodeArgs(body, &args); err != nil {
		return nil, err
	}
	cc := &s.captures
	now := time.Now()
	if args.Capture == "" {
		b, err := n.Backup(ctx)
		if err != nil {
			return nil, err
		}
		meta, err := member.NewBackupMeta(b.Index, b.Term, b.Table, now)
		if err != nil {
			return nil, err
		}
		id := cc.put(&capture{meta: meta, table: b.Table, lastUsed: now})
		s.log.Info("snapshot captured for a backup", "capture", id, "index", meta.Index, "term", meta.Term,
			"locks", meta.Locks, "bytes", meta.Size)
		return SnapshotSaveAnswer{Capture: id, Meta: meta}, nil
	}
	c := cc.get(args.Capture, now)
	if c == nil {
		st, err := n.Status(ctx)
		if err != nil {
			return nil, err
		}
		if st.Role != "leader" {
			return nil, &node.NotLeaderError{LeaderID: st.Leader, LeaderAddr: st.LeaderAddr}
		}
		return nil, &node.InvalidArgumentError{Reason: fmt.Sprintf("%s %q (dropped after %v, or the leader changed): start again", wire.ReasonUnknownCapture, args.Capture, captureTTL)}
	}
	if args.Offset < 0 || args.Offset > int64(len(c.table)) {
		return nil, &node.InvalidArgumentError{Reason: fmt.Sprintf("offset %d outside the capture's %d bytes", args.Offset, len(c.table))}
	}
	end := min(args.Offset+SnapshotChunk, int64(len(c.table)))
	return SnapshotSaveAnswer{Capture: args.Capture, Meta: c.meta, Offset: args.Offset, Data: c.table[args.Offset:end]}, nil
}

// put keeps c and returns its id, dropping expired captures and, past
// maxCaptures, the least recently used.
func (cc *captureCache) put(c *capture) string {
	var r [8]byte
	rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.expire(c.lastUsed)
	if cc.byID == nil {
		cc.byID = map[string]*capture{}
	}
	for len(cc.byID) >= maxCaptures {
		oldest := ""
		for k, v := range cc.byID {
			if oldest == "" || v.lastUsed.Before(cc.byID[oldest].lastUsed) {
				oldest = k
			}
		}
		delete(cc.byID, oldest)
	}
	cc.byID[id] = c
	return id
}

// get returns the capture id, nil if it is not kept (any more).
func (cc *captureCache) get(id string, now time.Time) *capture {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.expire(now)
	c := cc.byID[id]
	if c != nil {
		c.lastUsed = now
	}
	return c
}

func (cc *captureCache) expire(now time.Time) {
	for k, v := range cc.byID {
		if now.Sub(v.lastUsed) > captureTTL {
			delete(cc.byID, k)
		}
	}
}

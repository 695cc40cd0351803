package server_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// A membership change asked again after it applied (its first answer lost:
// the outcome was unknown, or the configuration read that follows the
// change met a leader change and the client re-sent it to the next leader)
// succeeds, reported unchanged, with the configuration: an add of a member
// present at the same peer address, a remove of a removed member. An add
// at another peer address, or a remove of an id the cluster never had,
// fails.
func TestRetriedMemberChangesSucceedUnchanged(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	c.WaitLeader()
	ctx := nodetest.Context(t, 20*time.Second)
	cl := nodetest.Client(t, c.Endpoints()...)
	change := func(command string, a wire.MemberArgs) (wire.MemberList, error) {
		var out wire.MemberList
		err := cl.Admin(ctx, command, a, &out, true)
		return out, err
	}
	has := func(l wire.MemberList, id uint64, role string) bool {
		for _, m := range l.Members {
			if m.ID == id {
				return m.Role == role
			}
		}
		return role == ""
	}
	add := wire.MemberArgs{ID: 4, PeerAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}
	for i, wantUnchanged := range []bool{false, true} {
		l, err := change("member.add", add)
		if err != nil || l.Unchanged != wantUnchanged || !has(l, 4, "learner") {
			t.Fatalf("add %d: %+v, %v; want member 4 a learner, unchanged %v", i+1, l, err, wantUnchanged)
		}
	}
	other := add
	other.PeerAddr = "127.0.0.1:3"
	var inv *client.InvalidArgumentError
	if _, err := change("member.add", other); !errors.As(err, &inv) {
		t.Fatalf("add at another peer address: %v, want invalid argument", err)
	}
	for i, wantUnchanged := range []bool{false, true} {
		l, err := change("member.remove", wire.MemberArgs{ID: 4})
		if err != nil || l.Unchanged != wantUnchanged || !has(l, 4, "") || len(l.Members) != 3 {
			t.Fatalf("remove %d: %+v, %v; want member 4 gone, unchanged %v", i+1, l, err, wantUnchanged)
		}
	}
	if _, err := change("member.remove", wire.MemberArgs{ID: 9}); !errors.As(err, &inv) {
		t.Fatalf("remove of an id the cluster never had: %v, want invalid argument", err)
	}
}

// snapshot.save hands out a table larger than a frame in chunks that fit
// one, from a capture at one applied index, through any member.
func TestSnapshotSaveStreamsTheTableInChunks(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 20*time.Second)
	const locks = 300
	for i := range locks {
		key := fmt.Sprintf("%04d-%s", i, strings.Repeat("k", 240)) // 73 KB of keys: three chunks
		if _, err := l.Acquire(ctx, key, time.Hour, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Through a follower's endpoint: the client follows the redirect.
	var follower string
	for id, addr := range c.Clients {
		if id != l.ID() {
			follower = addr
		}
	}
	cl := nodetest.Client(t, follower)
	var first server.SnapshotSaveAnswer
	if err := cl.Admin(ctx, "snapshot.save", nil, &first, true); err != nil {
		t.Fatal(err)
	}
	m := first.Meta
	if first.Capture == "" || m.Locks != locks || m.LastToken != locks || m.Index != nodetest.Status(t, l).Applied || len(first.Data) != 0 {
		t.Fatalf("capture answer %+v", first)
	}
	var table []byte
	chunks := 0
	for int64(len(table)) < m.Size {
		var a server.SnapshotSaveAnswer
		if err := cl.Admin(ctx, "snapshot.save", server.SnapshotSaveArgs{Capture: first.Capture, Offset: int64(len(table))}, &a, true); err != nil {
			t.Fatal(err)
		}
		if a.Meta != m || a.Offset != int64(len(table)) || len(a.Data) == 0 || len(a.Data) > server.SnapshotChunk {
			t.Fatalf("chunk at %d: meta %+v offset %d, %d bytes", len(table), a.Meta, a.Offset, len(a.Data))
		}
		table = append(table, a.Data...)
		chunks++
	}
	sum := sha256.Sum256(table)
	if hex.EncodeToString(sum[:]) != m.SHA256 || chunks != 3 {
		t.Fatalf("%d chunks, sha256 %x, want 3 chunks and %s", chunks, sum, m.SHA256)
	}
	if got, err := fsm.Restore(table); err != nil || got.Len() != locks {
		t.Fatalf("restored table: %v", err)
	}
	var inv *client.InvalidArgumentError
	err := cl.Admin(ctx, "snapshot.save", server.SnapshotSaveArgs{Capture: "nope"}, nil, true)
	if !errors.As(err, &inv) || !errors.Is(err, client.ErrUnknownCapture) {
		t.Fatalf("unknown capture: %v, want client.ErrUnknownCapture", err)
	}
	err = cl.Admin(ctx, "snapshot.save", server.SnapshotSaveArgs{Capture: first.Capture, Offset: m.Size + 1}, nil, true)
	if !errors.As(err, &inv) || errors.Is(err, client.ErrUnknownCapture) {
		t.Fatalf("offset past the end: %v", err)
	}
	err = cl.Admin(ctx, "snapshot.save", map[string]any{"capture": first.Capture, "ofset": 1}, nil, true)
	if !errors.As(err, &inv) {
		t.Fatalf("misspelt argument: %v", err)
	}
}

package node_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/syncio"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/logstore"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/peer"
)

// A handover that leaves this member leading (asked to transfer to
// itself, or the transfer failed) must leave it taking calls: before this
// rule `leader transfer --to <the leader>` left the leader draining, and
// every call ended Unavailable until the next election.
func TestHandOverToItselfKeepsTakingCalls(t *testing.T) {
	_, l, ctx := leading(t, 3, 20*time.Second)
	to, err := l.HandOver(ctx, l.ID())
	if err != nil || to != l.ID() {
		t.Fatalf("HandOver to itself = %d, %v; want %d, nil", to, err, l.ID())
	}
	if _, err := l.Acquire(ctx, "after-handover", time.Minute, 0, 0); err != nil {
		t.Fatalf("acquire after a handover to itself: %v", err)
	}
}

// A handover whose context ended while calls were in flight must neither
// transfer nor leave the leader draining.
func TestHandOverWithExpiredContextKeepsLeading(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	l := c.WaitLeader()
	expired := nodetest.Context(t, time.Nanosecond)
	<-expired.Done()
	if _, err := l.HandOver(expired, 0); err == nil {
		t.Fatal("HandOver with an expired context succeeded")
	}
	ctx := nodetest.Context(t, 20*time.Second)
	if _, err := l.Acquire(ctx, "after-expired-handover", time.Minute, 0, 0); err != nil {
		t.Fatalf("acquire after an abandoned handover: %v", err)
	}
	if lead, err := c.Leader(ctx); err != nil || lead != l.ID() {
		t.Fatalf("leader after an abandoned handover = %d, %v; want %d", lead, err, l.ID())
	}
}

// A single member has nobody to hand leadership to: a clean stop neither
// tries nor warns that the handover failed, and still answers the calls
// it proposed.
func TestShutdownOfASingleMemberTriesNoHandover(t *testing.T) {
	logs := syncio.NewBuffer()
	c := nodetest.New(t, 1, func(cfg *node.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	l := c.WaitLeader()
	ctx := nodetest.Context(t, 20*time.Second)
	if _, err := l.Acquire(ctx, "before-stop", time.Minute, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "handing leadership over") {
			t.Errorf("a single member's clean stop logged: %s", line)
		}
	}
}

// Rule guarded: a joiner's first start is all or nothing. What a first
// start cut short before it stored its identity leaves (the seeded store)
// is taken by the next join as if the directory were empty; a directory
// holding anything else is refused rather than joined over.
func TestJoinOverWhatAnInterruptedJoinLeft(t *testing.T) {
	self := freeport.For(t)
	boot := freeport.ForIDs(t, 1, 2, 3)
	join := func(dir string, bootstrap map[uint64]string) (*node.Node, error) {
		return node.New(node.Config{
			Config:     member.Config{ID: 4, Peers: map[uint64]string{4: self}},
			DataDir:    dir,
			ClientAddr: "127.0.0.1:1",
			Join:       &node.Join{ClusterID: 0xc1, Bootstrap: bootstrap, Members: map[uint64]string{4: self}},
		})
	}
	interrupted := func(t *testing.T) string {
		dir := t.TempDir()
		n, err := join(dir, boot)
		if err != nil {
			t.Fatal(err)
		}
		n.Close()
		// The crash came before the identity was stored.
		if err := os.Remove(filepath.Join(dir, "identity.json")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("same cluster", func(t *testing.T) {
		n, err := join(interrupted(t), boot)
		if err != nil {
			t.Fatalf("join over an interrupted join's leftovers: %v", err)
		}
		defer n.Close()
		if got := n.ClusterID(); got != 0xc1 {
			t.Fatalf("cluster id %x, want c1", got)
		}
	})
	t.Run("another bootstrap", func(t *testing.T) {
		other := map[uint64]string{1: boot[1], 2: boot[2], 5: freeport.For(t)}
		n, err := join(interrupted(t), other)
		if err == nil {
			n.Close()
			t.Fatal("joined over another cluster's seed")
		}
		if !strings.Contains(err.Error(), "no cluster identity") {
			t.Fatalf("unexpected error: %v", err)
		}
	})
}

// Rule guarded: a removed member takes no further part. One whose stored
// snapshot already covers its removal stops at start with ErrRemoved, as
// it does when it applies its removal.
func TestMemberWhoseSnapshotCoversItsRemovalStops(t *testing.T) {
	peers := freeport.ForIDs(t, 1, 2, 3)
	book := member.NewBook(peers)
	book.Members = book.Members[:2]
	book.Removed = []uint64{3}
	dir := filepath.Join(t.TempDir(), "data-3")
	// The store of member 3 after it snapshotted at index 7, where its
	// removal had applied (seeded as a restore seeds a snapshot).
	initial := logstore.InitialSnapshot([]uint64{1, 2}, member.EncodeSnapshot(fsm.New().Snapshot(), book))
	initial.Metadata.Index, initial.Metadata.Term = new(uint64(7)), new(uint64(2))
	s, err := logstore.OpenSeeded(dir, vfs.Default, initial, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	n, err := node.New(node.Config{Config: member.Config{ID: 3, Peers: peers, Logger: slog.New(slog.DiscardHandler)}, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the removed member keeps running")
	}
	if err := n.Err(); !errors.Is(err, node.ErrRemoved) {
		t.Fatalf("stopped with %v, want ErrRemoved", err)
	}
}

// Rule guarded: the peer address a member announces in its hellos is one
// its peers can dial: a member whose log does not know it yet answers it
// there (peer.TCP.learn). A member added with --join restarts with only
// its --peer-listen for itself (memberPeers), which may be a wildcard bind
// address such as 0.0.0.0:7004 (as README's multi-host example binds): it
// must announce the address the cluster recorded for it when it was
// added, not the bind address.
func TestRestartedJoinerAnnouncesItsRecordedPeerAddress(t *testing.T) {
	ln1, err := net.Listen("tcp", "127.0.0.1:0") // member 1, which member 4 dials
	if err != nil {
		t.Fatal(err)
	}
	defer ln1.Close()
	a4 := freeport.For(t)
	_, port, _ := net.SplitHostPort(a4)
	bind := "0.0.0.0:" + port

	// Member 4's store after it applied its own addition (at 127.0.0.1:port),
	// and the identity its first start stored.
	book := member.NewBook(map[uint64]string{1: ln1.Addr().String(), 4: a4})
	dir := filepath.Join(t.TempDir(), "data-4")
	initial := logstore.InitialSnapshot([]uint64{1}, member.EncodeSnapshot(fsm.New().Snapshot(), book))
	initial.Metadata.ConfState.Learners = []uint64{4}
	initial.Metadata.Index, initial.Metadata.Term = new(uint64(7)), new(uint64(2))
	s, err := logstore.OpenSeeded(dir, vfs.Default, initial, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := peer.OpenIdentity(dir, 0xc1, nil); err != nil {
		t.Fatal(err)
	}

	// The restart memberPeers makes: --join ignored, only --peer-listen.
	n, err := node.New(node.Config{
		Config:       member.Config{ID: 4, Peers: map[uint64]string{4: bind}, Logger: slog.New(slog.DiscardHandler)},
		DataDir:      dir,
		PeerListen:   bind,
		ClientAddr:   "127.0.0.1:1",
		TickInterval: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	ln1.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln1.Accept()
	if err != nil {
		t.Fatalf("member 4 never dialled member 1: %v", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		t.Fatal(err)
	}
	hello := make([]byte, binary.BigEndian.Uint32(l[:]))
	if _, err := io.ReadFull(r, hello); err != nil {
		t.Fatal(err)
	}
	b := hello[4:] // "RLP1"
	field := func() uint64 {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			t.Fatalf("bad hello %q", hello)
		}
		b = b[k:]
		return v
	}
	field()                     // from
	field()                     // to
	b = b[field():]             // client address
	field()                     // cluster id
	field()                     // incarnation
	field()                     // expected incarnation
	addr := string(b[:field()]) // the peer address
	if addr != a4 {
		t.Fatalf("member 4 announces peer address %q, want %q (the address the cluster recorded for it)", addr, a4)
	}
}

package node_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/logstore"
	"github.com/raftlock/raftlock/node/peer"
)

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
	a4, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
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

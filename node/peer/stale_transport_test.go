package peer

import (
	"net"
	"testing"

	"github.com/raftlock/raftlock/internal/freeport"
)

// Rule guarded: a member whose log and flags do not know a member added
// while it was down (member 4, now leading) still talks to it: the hello
// of a sender that passes the cluster identity checks and was not removed
// is accepted, and the address it announces is where its answers go, for
// as long as the address book does not know that member.
func TestHelloFromMemberNotInTheBookIsAnswered(t *testing.T) {
	a := freeport.ForIDs(t, 1, 2, 3, 4)
	const cluster = 0xc1
	m3, rec3 := startMember(t, 3, map[uint64]string{1: a[1], 2: a[2], 3: a[3]}, cluster)
	m4, rec4 := startMember(t, 4, map[uint64]string{3: a[3], 4: a[4]}, cluster)

	eventually(t, "member 3 to take member 4's heartbeat", func() { m4.Send(heartbeatMsg(4, 3)) },
		func() bool { return rec3.from(4) > 0 })
	if got := m3.PeerClientAddr(4); got != "client-of-4" {
		t.Errorf("member 3 redirects clients to member 4 at %q, want its announced client address", got)
	}
	eventually(t, "member 4 to hear member 3's answer", func() { m3.Send(heartbeatMsg(3, 4)) },
		func() bool { return rec4.from(3) > 0 })

	// A configuration change that does not add member 4 yet keeps it.
	m3.SetPeers(map[uint64]string{1: a[1], 2: a[2], 3: a[3]}, nil)
	before := rec4.from(3)
	eventually(t, "member 4 to still hear member 3", func() { m3.Send(heartbeatMsg(3, 4)) },
		func() bool { return rec4.from(3) > before })

	// Once member 4 is removed it is refused, and told why.
	m3.SetPeers(map[uint64]string{1: a[1], 2: a[2], 3: a[3]}, []uint64{4})
	if m3.isPeer(4) {
		t.Fatal("member 3 still sends to removed member 4")
	}
	eventually(t, "member 4 to learn it was removed", func() { m4.Send(heartbeatMsg(4, 3)) },
		func() bool { return len(rec4.removedBy()) > 0 })
}

// Rule guarded: only a member of this cluster is learned from its hello:
// one of another cluster, a removed one, or one that announces no peer
// address (a member from before the address was announced) is refused
// and never dialled.
func TestHelloFromStrangerIsNotLearned(t *testing.T) {
	const cluster = 0xc1
	a, m3, rec3 := startMember3(t, cluster)
	m3.SetPeers(map[uint64]string{1: a[1], 2: a[2], 3: a[3]}, []uint64{6})
	hello := func(from, clusterID uint64, peerAddr string) []byte { return rawHello(from, 3, clusterID, peerAddr) }
	for _, tc := range []struct {
		what string
		from uint64
		b    []byte
	}{
		{"another cluster", 5, hello(5, cluster+1, "127.0.0.1:1")},
		{"a removed member", 6, hello(6, cluster, "127.0.0.1:1")},
		{"no peer address", 7, hello(7, cluster, "")},
		{"a bad peer address", 8, hello(8, cluster, "nowhere")},
	} {
		c, err := net.Dial("tcp", m3.listenAddr)
		if err != nil {
			t.Fatal(err)
		}
		if !send(t, c, tc.b) {
			t.Errorf("%s: the stream stayed open", tc.what)
		}
		if m3.isPeer(tc.from) {
			t.Errorf("%s: member 3 learned member %d", tc.what, tc.from)
		}
	}
	if n := rec3.count(); n != 0 {
		t.Fatalf("%d messages from strangers reached raft", n)
	}
}

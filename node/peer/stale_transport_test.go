package peer

import (
	"encoding/binary"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/internal/freeport"
)

// removalRecorder records messages and removal notices.
type removalRecorder struct {
	recorder
	mu      sync.Mutex
	removed []uint64
}

func (r *removalRecorder) ReportRemoved(by uint64) {
	r.mu.Lock()
	r.removed = append(r.removed, by)
	r.mu.Unlock()
}

func (r *removalRecorder) removedBy() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.removed...)
}

func (r *recorder) from(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.got {
		if m.GetFrom() == id {
			n++
		}
	}
	return n
}

// startMember starts the transport of member id with peers, in cluster
// clusterID, after opts set it up.
func startMember(t *testing.T, id uint64, peers map[uint64]string, clusterID uint64, opts ...func(*Config)) (*TCP, *removalRecorder) {
	t.Helper()
	rec := &removalRecorder{}
	cfg := Config{ID: id, Peers: peers, ClientAddr: "client-of-" + string(rune('0'+id)), Identity: testIdentity(t, clusterID, peers)}
	return startTransport(t, cfg, rec, opts...), rec
}

// startTransport starts the transport cfg (after opts) describes, with a
// silent logger, closed when the test ends.
func startTransport(t *testing.T, cfg Config, h Handler, opts ...func(*Config)) *TCP {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	for _, o := range opts {
		o(&cfg)
	}
	tr, err := NewTCP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// testIdentity is a fresh member's identity in cluster clusterID.
func testIdentity(t *testing.T, clusterID uint64, peers map[uint64]string) *Identity {
	t.Helper()
	ident, err := OpenIdentity(t.TempDir(), clusterID, peers)
	if err != nil {
		t.Fatal(err)
	}
	return ident
}

// rawHello is what member from's sender writes first on a stream to
// member to: its hello in cluster clusterID, announcing peerAddr ("": none),
// then a heartbeat.
func rawHello(from, to, clusterID uint64, peerAddr string) []byte {
	ext := binary.AppendUvarint(nil, clusterID)
	ext = binary.AppendUvarint(ext, 7) // its incarnation
	ext = binary.AppendUvarint(ext, 0) // it knows none of member to
	if peerAddr != "" {
		ext = binary.AppendUvarint(ext, uint64(len(peerAddr)))
		ext = append(ext, peerAddr...)
	}
	b := AppendFrame(nil, append(EncodeHello(from, to, "x"), ext...))
	m, _ := proto.Marshal(heartbeatMsg(from, to)[0])
	return AppendFrame(b, m)
}

func heartbeatMsg(from, to uint64) []*raftpb.Message {
	return []*raftpb.Message{{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: new(from), To: new(to), Term: new(uint64(1))}}
}

// eventually sends what send sends (as raft would, again and again) until
// cond holds, or fails after 10 s.
func eventually(t *testing.T, what string, send func(), cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		send()
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

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

package peer

// The helpers the transport's tests share: members started on loopback,
// what they hand raft recorded, and raw streams written as a peer would.

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

type recorder struct {
	mu  sync.Mutex
	got []*raftpb.Message
}

func (r *recorder) Receive(m *raftpb.Message) { r.mu.Lock(); r.got = append(r.got, m); r.mu.Unlock() }
func (r *recorder) ReportUnreachable(uint64)  {}
func (r *recorder) ReportSnapshot(uint64, bool) {
}
func (r *recorder) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.got) }

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
	return append(helloFrame(from, to, &Identity{ClusterID: clusterID, Incarnation: 7}, peerAddr), heartbeatFrame(from, to, 0)...)
}

// helloFrame is the framed hello of member from to member to, which
// knows none of member to: with id's cluster identity (none when id is
// nil) and, with an identity, peerAddr ("": none) as its peer address.
func helloFrame(from, to uint64, id *Identity, peerAddr string) []byte {
	hello := append(EncodeHello(from, to, "x"), id.helloExtension(to)...)
	if id != nil && peerAddr != "" {
		hello = binary.AppendUvarint(hello, uint64(len(peerAddr)))
		hello = append(hello, peerAddr...)
	}
	return AppendFrame(nil, hello)
}

// heartbeatFrame is a framed heartbeat from member from to member to,
// committing commit (none when 0).
func heartbeatFrame(from, to, commit uint64) []byte {
	m := heartbeatMsg(from, to)[0]
	if commit != 0 {
		m.Commit = new(commit)
	}
	b, _ := proto.Marshal(m)
	return AppendFrame(nil, b)
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

// send writes b on c and waits for the member to close the stream (or
// for a short while, when it keeps it).
func send(t *testing.T, c net.Conn, b []byte) (closed bool) {
	t.Helper()
	defer c.Close()
	c.Write(b)
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err := io.Copy(io.Discard, c)
	return err == nil || !strings.Contains(err.Error(), "timeout")
}

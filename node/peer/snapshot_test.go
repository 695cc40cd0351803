package peer

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/internal/freeport"
)

// snapHandler records what a transport delivers and the snapshot reports
// it makes.
type snapHandler struct {
	mu      sync.Mutex
	got     []*raftpb.Message
	reports []bool // failed, per ReportSnapshot
}

func (h *snapHandler) Receive(m *raftpb.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, m)
}
func (h *snapHandler) ReportUnreachable(uint64) {}
func (h *snapHandler) ReportSnapshot(_ uint64, failed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reports = append(h.reports, failed)
}

func (h *snapHandler) snapshots() []*raftpb.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*raftpb.Message
	for _, m := range h.got {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			out = append(out, m)
		}
	}
	return out
}

func (h *snapHandler) reported() []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bool(nil), h.reports...)
}

// waitFor polls cond every 5 ms until it holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The small limits of these tests: a 1 MiB snapshot is sixteen times the
// frame limit, 64 chunks.
const (
	testFrameLimit = 64 << 10
	testChunk      = 16 << 10
	testSnapSize   = 1 << 20
)

func smallFrames(cfg *Config) {
	cfg.FrameLimit = testFrameLimit
	cfg.SnapshotChunkSize = testChunk
}

// snapPair starts member 1 (the sender) and member 2 (the receiver, its
// spool directory returned) in one cluster, each with small frames and
// then the options given.
func snapPair(t *testing.T, sendOpts, recvOpts []func(*Config)) (send *TCP, sent *snapHandler, recv *TCP, got *snapHandler, spool string) {
	t.Helper()
	a := freeport.ForIDs(t, 1, 2)
	spool = filepath.Join(t.TempDir(), "snap.tmp")
	start := func(id uint64, opts []func(*Config)) (*TCP, *snapHandler) {
		cfg := Config{ID: id, Peers: a, ClientAddr: "client", Identity: testIdentity(t, 0x5a, a)}
		smallFrames(&cfg)
		if id == 2 {
			cfg.SnapshotDir = spool
		}
		h := &snapHandler{}
		return startTransport(t, cfg, h, opts...), h
	}
	recv, got = start(2, recvOpts)
	send, sent = start(1, sendOpts)
	return send, sent, recv, got, spool
}

func snapMsg(from, to uint64, data []byte) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), From: new(from), To: new(to), Term: new(uint64(3)),
		Snapshot: &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(100)), Term: new(uint64(3)),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}}}}}
}

func randomData(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// spoolFiles lists the files in a spool directory.
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// streamsDone says whether recv has no inbound snapshot stream open: its
// spool file, if any, is removed by then.
func streamsDone(recv *TCP) bool {
	recv.mu.Lock()
	defer recv.mu.Unlock()
	return len(recv.snapIn) == 0
}

// faultConn breaks one outbound snapshot stream in transit: it flips the
// last byte of the flip-th write of a chunk's size (a frame is one write,
// and a chunk's last byte is data) or, at the cut-th such write, writes
// half of it and closes the connection.
type faultConn struct {
	net.Conn
	big       int
	flip, cut int
}

var errCut = errors.New("cut by the test")

func (c *faultConn) Write(b []byte) (int, error) {
	if len(b) < testChunk {
		return c.Conn.Write(b)
	}
	c.big++
	switch c.big {
	case c.flip:
		b = bytes.Clone(b)
		b[len(b)-1] ^= 0x01
	case c.cut:
		n, _ := c.Conn.Write(b[:len(b)/2])
		c.Conn.Close()
		return n, errCut
	}
	return c.Conn.Write(b)
}

// faultFirst makes the first snapshot stream a transport opens a
// faultConn; later ones (raft's retries) go through untouched.
func faultFirst(flip, cut int) func(*Config) {
	var n atomic.Int32
	return func(cfg *Config) {
		cfg.wrapConn = func(c net.Conn) net.Conn {
			if n.Add(1) == 1 {
				return &faultConn{Conn: c, flip: flip, cut: cut}
			}
			return c
		}
	}
}

// Rule guarded: a snapshot larger than a frame arrives (rule 10: no frame
// past the limit, yet no table is too large to reach a follower). It
// streams in chunks no larger than the chunk size, reaches raft intact,
// and is reported delivered exactly once, after the receiver handed it to
// raft; the spool file is gone.
func TestSnapshotLargerThanFrameLimitArrivesInChunks(t *testing.T) {
	send, sent, recv, got, spool := snapPair(t, nil, nil)
	data := randomData(t, testSnapSize)
	send.Send([]*raftpb.Message{snapMsg(1, 2, data)})
	waitFor(t, "the snapshot's report", func() bool { return len(sent.reported()) > 0 })
	if r := sent.reported(); r[0] {
		t.Fatalf("the snapshot was reported failed: %v", r)
	}
	snaps := got.snapshots()
	if len(snaps) != 1 {
		t.Fatalf("raft got %d snapshots, want 1", len(snaps))
	}
	if !bytes.Equal(snaps[0].GetSnapshot().GetData(), data) {
		t.Fatalf("the snapshot arrived with %d bytes that differ from the %d sent", len(snaps[0].GetSnapshot().GetData()), len(data))
	}
	if snaps[0].GetSnapshot().GetMetadata().GetIndex() != 100 || snaps[0].GetTerm() != 3 {
		t.Fatalf("the snapshot's message arrived changed: %v", snaps[0])
	}
	waitFor(t, "the receiver's stream to end", func() bool { return streamsDone(recv) })
	noSpoolFiles(t, spool, "after delivery")
	send.Close()
	reportedOnce(t, sent)
}

// While a snapshot streams, the regular stream keeps carrying heartbeats:
// the receiver's first chunks are held up until heartbeats sent after the
// snapshot arrived.
func TestHeartbeatsFlowDuringASnapshotStream(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the transports close, should the test fail early
	hold := func(cfg *Config) {
		cfg.wrapConn = func(c net.Conn) net.Conn { return &heldConn{Conn: c, release: release} }
	}
	send, sent, _, got, _ := snapPair(t, []func(*Config){hold}, nil)
	send.Send([]*raftpb.Message{snapMsg(1, 2, randomData(t, testSnapSize))})
	waitFor(t, "heartbeats behind a snapshot in flight", func() bool {
		send.Send(heartbeatMsg(1, 2))
		got.mu.Lock()
		defer got.mu.Unlock()
		return len(got.got) >= 3
	})
	if len(got.snapshots()) != 0 || len(sent.reported()) != 0 {
		t.Fatal("the held snapshot arrived before it was released")
	}
	once.Do(func() { close(release) })
	waitFor(t, "the snapshot's report", func() bool { return len(sent.reported()) > 0 })
	if r := sent.reported(); r[0] || len(got.snapshots()) != 1 {
		t.Fatalf("reports %v, %d snapshots delivered; want delivered once", r, len(got.snapshots()))
	}
}

// heldConn holds writes of chunk size until release is closed.
type heldConn struct {
	net.Conn
	release chan struct{}
}

func (c *heldConn) Write(b []byte) (int, error) {
	if len(b) >= testChunk {
		<-c.release
	}
	return c.Conn.Write(b)
}

// Rule guarded: a snapshot whose bytes changed in transit never reaches
// raft. The SHA-256 is checked before raft sees anything; the snapshot is
// reported failed once, and the spool file is removed.
func TestCorruptedSnapshotChunkIsRefusedBeforeRaft(t *testing.T) {
	send, sent, recv, got, spool := snapPair(t, []func(*Config){faultFirst(20, 0)}, nil)
	send.Send([]*raftpb.Message{snapMsg(1, 2, randomData(t, testSnapSize))})
	deliveredNothing(t, sent, recv, got, spool, "corrupted snapshot")
	send.Close()
	reportedOnce(t, sent)
}

// Rule guarded: a stream cut mid-transfer leaves nothing raft sees and no
// spool file, and the snapshot is reported failed once; raft's retry
// then gets through.
func TestSnapshotStreamCutMidTransferDeliversNothing(t *testing.T) {
	send, sent, recv, got, spool := snapPair(t, []func(*Config){faultFirst(0, 20)}, nil)
	data := randomData(t, testSnapSize)
	send.Send([]*raftpb.Message{snapMsg(1, 2, data)})
	deliveredNothing(t, sent, recv, got, spool, "cut snapshot stream")
	reportedOnce(t, sent)

	send.Send([]*raftpb.Message{snapMsg(1, 2, data)}) // raft's retry
	waitFor(t, "the retry's report", func() bool { return len(sent.reported()) > 1 })
	if r := sent.reported(); r[1] || len(got.snapshots()) != 1 || !bytes.Equal(got.snapshots()[0].GetSnapshot().GetData(), data) {
		t.Fatalf("the retry: reports %v, %d snapshots delivered", r, len(got.snapshots()))
	}
}

// deliveredNothing checks the end of a snapshot stream that failed, what
// naming how: the snapshot reported failed, and once the receiver's
// stream ended, nothing handed to raft and no spool file left.
func deliveredNothing(t *testing.T, sent *snapHandler, recv *TCP, got *snapHandler, spool, what string) {
	t.Helper()
	waitFor(t, "the snapshot's report", func() bool { return len(sent.reported()) > 0 })
	if r := sent.reported(); !r[0] {
		t.Fatalf("a %s was reported delivered: %v", what, r)
	}
	waitFor(t, "the receiver's stream to end", func() bool { return streamsDone(recv) })
	if n := len(got.snapshots()); n != 0 {
		t.Fatalf("raft got %d snapshots from a %s", n, what)
	}
	noSpoolFiles(t, spool, "by a "+what)
}

// noSpoolFiles fails t if the spool directory holds a file; when says
// after what.
func noSpoolFiles(t *testing.T, spool, when string) {
	t.Helper()
	if f := spoolFiles(t, spool); len(f) != 0 {
		t.Fatalf("spool files left %s: %v", when, f)
	}
}

// reportedOnce fails t unless the snapshot was reported exactly once.
func reportedOnce(t *testing.T, sent *snapHandler) {
	t.Helper()
	if r := sent.reported(); len(r) != 1 {
		t.Fatalf("the snapshot was reported %d times: %v", len(r), r)
	}
}

// A member that died mid-stream left a spool file: the next start removes
// it (and nothing else in the directory).
func TestLeftoverSpoolFilesAreRemovedAtStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snap.tmp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"snap-1-123.spool", "snap-3-9.spool", "keep.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	startMember(t, 2, freeport.ForIDs(t, 1, 2), 0x5a, func(cfg *Config) { cfg.SnapshotDir = dir })
	if f := spoolFiles(t, dir); len(f) != 1 || f[0] != "keep.txt" {
		t.Fatalf("after start the spool directory holds %v, want only keep.txt", f)
	}
}

// rawSnapshotStream dials tr as member 1 (tr without a cluster identity)
// and sends a hello, the marker and a header announcing size bytes.
func rawSnapshotStream(t *testing.T, tr *TCP, size uint64) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", tr.listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hdr, err := proto.Marshal(snapMsg(1, 2, nil))
	if err != nil {
		t.Fatal(err)
	}
	b := AppendFrame(nil, EncodeHello(1, 2, "x"))
	b = AppendFrame(b, []byte(snapshotStreamMarker))
	b = AppendFrame(b, encodeSnapshotHeader(snapshotHeader{size: size, sum: sha256.Sum256(nil), msg: hdr}))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

func startPlain(t *testing.T, h Handler, opts ...func(*Config)) *TCP {
	t.Helper()
	return startTransport(t, Config{ID: 2, Peers: freeport.ForIDs(t, 1, 2)}, h, opts...)
}

// Rule guarded: a header announcing more data than the limit is refused
// before anything is spooled.
func TestSnapshotHeaderAnnouncingAGiantSizeIsRefused(t *testing.T) {
	h := &snapHandler{}
	tr := startPlain(t, h)
	c, r := rawSnapshotStream(t, tr, 1<<40)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := readFrame(r, maxAckFrame)
	if err != nil {
		t.Fatalf("no answer to a giant header: %v", err)
	}
	rp, err := decodeReply(b)
	if err != nil || rp.kind != kindRefused || !strings.Contains(rp.reason, "over the limit") {
		t.Fatalf("answer %+v, %v; want refused over the limit", rp, err)
	}
	if !closedWithin(c, 5*time.Second) {
		t.Fatal("the stream stayed open after its refusal")
	}
	if f := spoolFiles(t, tr.snap.dir); len(f) != 0 || len(h.snapshots()) != 0 {
		t.Fatalf("a refused header left %v spooled and %d snapshots delivered", f, len(h.snapshots()))
	}
}

// Rule guarded: one inbound snapshot stream per sender; a second one
// while the first is open is closed, and the first goes on.
func TestSecondSnapshotStreamFromOneSenderIsRefused(t *testing.T) {
	h := &snapHandler{}
	tr := startPlain(t, h, withReadTimeout(5*time.Second))
	first, fr := rawSnapshotStream(t, tr, 10)
	waitFor(t, "the first stream to open", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.snapIn[1]
	})
	second, _ := rawSnapshotStream(t, tr, 10)
	if !closedWithin(second, 5*time.Second) {
		t.Fatal("a second snapshot stream from member 1 was kept open")
	}
	first.Write(AppendFrame(nil, encodeChunk(nil, 0, []byte("0123456789"))))
	first.SetReadDeadline(time.Now().Add(5 * time.Second))
	var kinds []byte
	for range 2 {
		b, err := readFrame(fr, maxAckFrame)
		if err != nil {
			t.Fatalf("the first stream after the second was refused: %v (answers %q)", err, kinds)
		}
		rp, _ := decodeReply(b)
		kinds = append(kinds, rp.kind)
	}
	// The header's SHA-256 is of no data, so the 10 bytes are refused.
	if string(kinds) != string([]byte{kindAck, kindRefused}) {
		t.Fatalf("the first stream answered %q, want an ack then a refusal", kinds)
	}
}

// The planted twin: with UnsafeSkipSnapshotChecks (snapshot-partial), a
// stream cut before its last chunk delivers the part that arrived, and a
// corrupted one is delivered as it came. Raft would install either.
func TestBugSnapshotPartialInstallsBeforeTheLastChunk(t *testing.T) {
	skip := func(cfg *Config) { cfg.UnsafeSkipSnapshotChecks = true }
	send, _, recv, got, _ := snapPair(t, []func(*Config){faultFirst(0, 20)}, []func(*Config){skip})
	data := randomData(t, testSnapSize)
	send.Send([]*raftpb.Message{snapMsg(1, 2, data)})
	waitFor(t, "the receiver's stream to end", func() bool { return len(got.snapshots()) > 0 && streamsDone(recv) })
	part := got.snapshots()[0].GetSnapshot().GetData()
	if len(part) == 0 || len(part) >= len(data) || !bytes.Equal(part, data[:len(part)]) {
		t.Fatalf("with snapshot-partial raft got %d bytes of %d; want the prefix that arrived", len(part), len(data))
	}

	send2, _, recv2, got2, _ := snapPair(t, []func(*Config){faultFirst(20, 0)}, []func(*Config){skip})
	send2.Send([]*raftpb.Message{snapMsg(1, 2, data)})
	waitFor(t, "the receiver's stream to end", func() bool { return len(got2.snapshots()) > 0 && streamsDone(recv2) })
	if d := got2.snapshots()[0].GetSnapshot().GetData(); len(d) != len(data) || bytes.Equal(d, data) {
		t.Fatalf("with snapshot-partial a corrupted snapshot was not delivered as it came")
	}
}

// A chunk size at or over the frame limit is cut to fit it.
func TestChunkFitsTheFrameLimit(t *testing.T) {
	c := newSnapshotConfig()
	c.frameLimit, c.chunkSize = 1000, 1000
	if got := c.chunkLen(); got+chunkOverhead > 1000 {
		t.Fatalf("chunk of %d bytes in frames of at most 1000", got)
	}
}

func FuzzDecodeSnapshotHeader(f *testing.F) {
	hdr, _ := proto.Marshal(snapMsg(1, 2, nil))
	f.Add(encodeSnapshotHeader(snapshotHeader{size: 12345, sum: sha256.Sum256([]byte("x")), msg: hdr}))
	f.Add([]byte("RLSH"))
	f.Add([]byte("RLSH\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeSnapshotHeader(b)
		if err != nil {
			return
		}
		h2, err := decodeSnapshotHeader(encodeSnapshotHeader(h))
		if err != nil || h2.size != h.size || h2.sum != h.sum || !bytes.Equal(h2.msg, h.msg) {
			t.Fatalf("header %+v does not survive a round trip: %+v, %v", h, h2, err)
		}
		proto.Unmarshal(h.msg, &raftpb.Message{}) // as the receiver does next: must not panic
	})
}

func FuzzDecodeChunk(f *testing.F) {
	f.Add(encodeChunk(nil, 0, []byte("data")))
	f.Add(encodeChunk(nil, 1<<40, []byte{0}))
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, data, err := decodeChunk(b)
		if err != nil {
			return
		}
		if len(data) == 0 {
			t.Fatal("an empty chunk was accepted")
		}
		seq2, data2, err := decodeChunk(encodeChunk(nil, seq, data))
		if err != nil || seq2 != seq || !bytes.Equal(data2, data) {
			t.Fatalf("chunk %d does not survive a round trip: %d, %v", seq, seq2, err)
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	for _, r := range []reply{{kind: kindAck, n: 7}, {kind: kindDelivered, n: 1 << 30}, {kind: kindRefused, reason: "no"}} {
		f.Add(encodeReply(r))
	}
	f.Add([]byte{kindAck, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeReply(b)
		if err != nil {
			return
		}
		r2, err := decodeReply(encodeReply(r))
		if err != nil || r2 != r {
			t.Fatalf("reply %+v does not survive a round trip: %+v, %v", r, r2, err)
		}
	})
}

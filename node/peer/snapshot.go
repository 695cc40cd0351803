package peer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Snapshot streams.
//
// A raft snapshot holds the whole lock table, which may be far larger than
// any frame a member should accept (a frame is allocated whole by its
// reader). So a MsgSnap never travels on the regular stream: its sender
// goroutine hands it to a goroutine that dials the peer again, as it dials
// the regular stream (TLS, the same hello with its identity checks), and
// sends, each in its own frame:
//
//   - the marker snapshotStreamMarker, which makes the stream a snapshot
//     stream;
//   - the header: magic "RLSH", the data's size (uvarint), its SHA-256
//     (32 bytes), then the raft message with Snapshot.Data empty;
//   - the data in chunks of at most the chunk size: a uvarint sequence
//     number from 0, then the bytes.
//
// The receiver answers each chunk written to its spool file with an ack
// (kindAck, the number of chunks written), and the sender never has more
// than snapshotWindow chunks unacknowledged. After the last chunk the
// receiver checks the size and the SHA-256, reads the file back, hands the
// message to raft (Handler.Receive), removes the file and answers
// kindDelivered; anything wrong closes the stream, after a kindRefused
// with the reason when there is one to give. The sender reports the
// snapshot to raft exactly once: delivered only on kindDelivered, failed
// on anything else, so raft sends it again.
//
// A dedicated stream keeps heartbeats and appends to the peer flowing on
// the regular one while a snapshot of gigabytes is under way, as etcd's
// snapshot sender does; raft sends a follower no appends while it waits
// for its snapshot, so nothing depends on the order between the two.
//
// Compatibility: the marker is a frame rather than a field added to the
// hello because a member from before snapshot streams refuses a hello with
// bytes it does not know (decodeHelloExtension), and it would refuse the
// regular stream as well if the hello changed. The marker starts with a
// zero byte, which is field number 0 to protobuf, invalid, so such a
// member fails to decode it as a raft message and closes the stream: the
// new sender reports the snapshot failed and raft retries, and the
// regular stream is unaffected. A cluster being upgraded therefore sends
// no snapshots to members still on the old binary, which is what they
// did anyway with a table past the old 64 MiB frame.
const snapshotStreamMarker = "\x00RLSNAP1"

const (
	snapshotHeaderMagic = "RLSH"
	// DefaultSnapshotChunkSize is the most data one chunk frame carries
	// when Config.SnapshotChunkSize is zero.
	DefaultSnapshotChunkSize = 1 << 20
	// DefaultFrameLimit is the largest frame a member reads, and the
	// largest message it sends on the regular stream, when Config.FrameLimit
	// is zero. It must exceed raft's largest append (about 1 MiB
	// of entries, plus one entry).
	DefaultFrameLimit = 64 << 20
	// DefaultMaxSnapshotSize refuses a header announcing more snapshot
	// data than this when Config.MaxSnapshotSize is zero: far past the
	// largest table the key limits allow (--max-keys 1,000,000 of 4 KiB
	// keys is about 4 GiB), and short of what fills a disk by accident.
	DefaultMaxSnapshotSize = 16 << 30
	// chunkOverhead is the most a chunk frame carries besides data: its
	// sequence number.
	chunkOverhead = binary.MaxVarintLen64
	// snapshotWindow is how many chunks a sender may have unacknowledged:
	// a few, so a slow disk at the receiver slows the sender down before
	// megabytes pile up in socket buffers, and enough that one round trip
	// per chunk does not bound the throughput.
	snapshotWindow = 8
	// snapshotWriteTimeout bounds the write of one frame of a snapshot
	// stream (per chunk, not per snapshot: a large snapshot takes as long
	// as it takes while it keeps moving).
	snapshotWriteTimeout = 5 * time.Second
	// snapshotAckTimeout bounds the wait for the ack that reopens the
	// window: a receiver writes a chunk to disk and answers.
	snapshotAckTimeout = 10 * time.Second
	// snapshotDeliverTimeout bounds the wait for kindDelivered after the
	// last chunk: the receiver hashes, reads the file back and hands the
	// message to raft, whose loop may be busy.
	snapshotDeliverTimeout = time.Minute
	// spoolPattern names a receiver's spool files; Start removes what a
	// crash left.
	spoolPrefix, spoolSuffix = "snap-", ".spool"
	// maxAckFrame bounds a frame on the way back (acks, refusals).
	maxAckFrame = 512
)

// Kinds of the frames a snapshot receiver sends back.
const (
	kindAck       byte = 'A' // uvarint: chunks written so far
	kindDelivered byte = 'D' // uvarint: data bytes delivered to raft
	kindRefused   byte = 'R' // the reason, text
)

// snapshotConfig is how a transport streams snapshots.
type snapshotConfig struct {
	chunkSize  int
	frameLimit int
	maxSize    int64
	dir        string // spool directory; "" until Start picks a private one
	ownDir     bool   // dir was made by Start and is removed by Close
	// checks: a received snapshot reaches raft only when it arrived whole
	// with the size and SHA-256 its header announced (rule 10). False only
	// for the planted bug snapshot-partial (Config.UnsafeSkipSnapshotChecks).
	checks bool
	// source reads snapshots raft gives by reference (Config.SnapshotSource).
	source SnapshotSource
	// wrapConn, in tests, wraps the connection of an outbound snapshot
	// stream (to corrupt or cut it in transit).
	wrapConn func(net.Conn) net.Conn
}

func newSnapshotConfig() snapshotConfig {
	return snapshotConfig{chunkSize: DefaultSnapshotChunkSize, frameLimit: DefaultFrameLimit,
		maxSize: DefaultMaxSnapshotSize, checks: true}
}

// SnapshotSpoolDir is where a member with data directory dataDir spools
// inbound snapshots.
func SnapshotSpoolDir(dataDir string) string { return filepath.Join(dataDir, "snap.tmp") }

// chunkLen is the most data this member puts in one chunk frame.
func (c *snapshotConfig) chunkLen() int {
	return max(1, min(c.chunkSize, c.frameLimit-chunkOverhead))
}

// openSpool readies the spool directory: created if need be, emptied of
// what a member that died mid-stream left (a broken stream is never
// resumed: raft sends the snapshot again, whole).
func (c *snapshotConfig) openSpool() error {
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "raftlock-snap-")
		if err != nil {
			return fmt.Errorf("create a snapshot spool directory: %w", err)
		}
		c.dir, c.ownDir = dir, true
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("create the snapshot spool directory: %w", err)
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("read the snapshot spool directory: %w", err)
	}
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, spoolPrefix) && strings.HasSuffix(name, spoolSuffix) {
			if err := os.Remove(filepath.Join(c.dir, name)); err != nil {
				return fmt.Errorf("remove a leftover snapshot spool file: %w", err)
			}
		}
	}
	return nil
}

func (c *snapshotConfig) closeSpool() {
	if c.ownDir {
		os.RemoveAll(c.dir)
	}
}

// snapshotHeader is the first frame of a snapshot stream after the marker.
type snapshotHeader struct {
	size uint64
	sum  [sha256.Size]byte
	msg  []byte // the raft message, Snapshot.Data empty
}

func encodeSnapshotHeader(h snapshotHeader) []byte {
	b := []byte(snapshotHeaderMagic)
	b = binary.AppendUvarint(b, h.size)
	b = append(b, h.sum[:]...)
	return append(b, h.msg...)
}

func decodeSnapshotHeader(b []byte) (snapshotHeader, error) {
	var h snapshotHeader
	if !bytes.HasPrefix(b, []byte(snapshotHeaderMagic)) {
		return h, errors.New("not a snapshot header")
	}
	b = b[len(snapshotHeaderMagic):]
	size, n := binary.Uvarint(b)
	if n <= 0 {
		return h, errors.New("bad size in snapshot header")
	}
	b = b[n:]
	if len(b) < sha256.Size {
		return h, errors.New("truncated snapshot header")
	}
	h.size = size
	copy(h.sum[:], b)
	h.msg = b[sha256.Size:]
	return h, nil
}

func encodeChunk(b []byte, seq uint64, data []byte) []byte {
	b = binary.AppendUvarint(b, seq)
	return append(b, data...)
}

func decodeChunk(b []byte) (seq uint64, data []byte, err error) {
	seq, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errors.New("bad sequence number in snapshot chunk")
	}
	if len(b) == n {
		return 0, nil, fmt.Errorf("empty snapshot chunk %d", seq)
	}
	return seq, b[n:], nil
}

// reply is a frame a snapshot receiver sends back.
type reply struct {
	kind   byte
	n      uint64 // kindAck, kindDelivered
	reason string // kindRefused
}

func encodeReply(r reply) []byte {
	b := []byte{r.kind}
	if r.kind == kindRefused {
		return append(b, r.reason...)
	}
	return binary.AppendUvarint(b, r.n)
}

func decodeReply(b []byte) (reply, error) {
	if len(b) == 0 {
		return reply{}, errors.New("empty snapshot reply")
	}
	r := reply{kind: b[0]}
	switch r.kind {
	case kindRefused:
		r.reason = string(b[1:])
		return r, nil
	case kindAck, kindDelivered:
		v, n := binary.Uvarint(b[1:])
		if n <= 0 || n != len(b)-1 {
			return reply{}, errors.New("bad number in snapshot reply")
		}
		r.n = v
		return r, nil
	}
	return reply{}, fmt.Errorf("unknown snapshot reply kind %#x", r.kind)
}

// withoutData is m with Snapshot.Data left out, sharing m's other fields
// (m belongs to raft, which may still read it: it is never changed).
func withoutData(m *raftpb.Message) *raftpb.Message {
	out := &raftpb.Message{}
	dst := out.ProtoReflect()
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Name() != "snapshot" {
			dst.Set(fd, v)
		}
		return true
	})
	if s := m.GetSnapshot(); s != nil {
		out.Snapshot = &raftpb.Snapshot{Metadata: s.GetMetadata()}
	}
	return out
}

// startSnapshot sends m, a MsgSnap, on a snapshot stream of its own, and
// reports the outcome to raft once it is known. Raft sends a follower one
// snapshot at a time (it waits for the report), so a second one while the
// first is under way is a leader that changed its mind; it is reported
// failed and raft asks again later.
func (p *peerSender) startSnapshot(m *raftpb.Message) {
	if !p.snapping.CompareAndSwap(false, true) {
		p.t.log.Warn("a snapshot for this peer is already being sent; reporting the new one failed", "peer", p.id)
		p.t.handler.ReportSnapshot(p.id, true)
		return
	}
	p.t.wg.Add(1) // the sender's run holds the group open: no race with Close's Wait
	go func() {
		defer p.t.wg.Done()
		start := time.Now()
		err := p.sendSnapshot(m)
		p.snapping.Store(false)
		if err != nil {
			if p.ctx.Err() == nil {
				p.t.log.Warn("snapshot not delivered", "peer", p.id, "index", m.GetSnapshot().GetMetadata().GetIndex(), "err", err)
			}
		} else {
			p.t.log.Info("sent snapshot", "peer", p.id, "index", m.GetSnapshot().GetMetadata().GetIndex(),
				"chunk", p.t.snap.chunkLen(), "took", time.Since(start).Round(time.Millisecond))
		}
		p.t.handler.ReportSnapshot(p.id, err != nil)
	}()
}

// SnapshotSource opens the data of a snapshot raft asked to send when its
// Data is only a reference to where the data is stored (logstore.Disk
// keeps a reference in memory, not a table of hundreds of megabytes).
// ok is false for data that is the snapshot itself.
type SnapshotSource interface {
	OpenSnapshot(data []byte) (r io.ReadCloser, size int64, sum [sha256.Size]byte, ok bool, err error)
}

// snapshotData opens what m's snapshot carries: its own bytes, or those
// its reference names.
func (t *TCP) snapshotData(m *raftpb.Message) (io.ReadCloser, uint64, [sha256.Size]byte, error) {
	data := m.GetSnapshot().GetData()
	if src := t.snap.source; src != nil {
		r, size, sum, ok, err := src.OpenSnapshot(data)
		if err != nil {
			return nil, 0, sum, fmt.Errorf("read the snapshot to send: %w", err)
		}
		if ok {
			return r, uint64(size), sum, nil
		}
	}
	return io.NopCloser(bytes.NewReader(data)), uint64(len(data)), sha256.Sum256(data), nil
}

// sendSnapshot streams m to the peer on a new connection and returns nil
// only once the receiver said it delivered it to raft.
func (p *peerSender) sendSnapshot(m *raftpb.Message) error {
	data, size, sum, err := p.t.snapshotData(m)
	if err != nil {
		return err
	}
	defer data.Close()
	hdr, err := proto.Marshal(withoutData(m))
	if err != nil {
		return fmt.Errorf("encode snapshot header: %w", err)
	}
	c, err := p.dialSnapshot()
	if err != nil {
		return err
	}
	defer p.t.track(c, false)
	defer c.Close()
	stop := context.AfterFunc(p.ctx, func() { c.Close() }) // the peer left, or the transport closes
	defer stop()

	s := &snapshotConn{c: c, w: bufio.NewWriterSize(c, 64<<10), r: bufio.NewReaderSize(c, 4<<10)}
	hello := append(EncodeHello(p.t.id, p.id, p.t.clientAddr), p.t.helloExtension(p.id)...)
	h := snapshotHeader{size: size, sum: sum, msg: hdr}
	for _, frame := range [][]byte{hello, []byte(snapshotStreamMarker), encodeSnapshotHeader(h)} {
		if err := s.write(frame); err != nil {
			return err
		}
	}
	if err := s.sendChunks(data, size, p.t.snap.chunkLen()); err != nil {
		return err
	}
	return s.awaitDelivered(size)
}

// dialSnapshot dials the peer for a snapshot stream of its own; the
// connection is tracked (closed with the transport).
func (p *peerSender) dialSnapshot() (net.Conn, error) {
	dctx, cancel := context.WithTimeout(p.ctx, peerDialTimeout)
	c, err := p.t.dial(dctx, p.id, p.addr)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("dial for a snapshot stream: %w", err)
	}
	if wrap := p.t.snap.wrapConn; wrap != nil {
		c = wrap(c)
	}
	if !p.t.track(c, true) {
		c.Close()
		return nil, errors.New("transport closed")
	}
	return c, nil
}

// snapshotConn is the sender's side of a snapshot stream: frames out, the
// receiver's answers in, and the chunks sent and acknowledged so far.
type snapshotConn struct {
	c           net.Conn
	w           *bufio.Writer
	r           *bufio.Reader
	sent, acked uint64
}

// write sends one frame within its own deadline.
func (s *snapshotConn) write(payload []byte) error {
	s.c.SetWriteDeadline(time.Now().Add(snapshotWriteTimeout))
	s.w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(payload))))
	s.w.Write(payload) // a bufio.Writer keeps its first error for Flush
	return s.w.Flush()
}

// await reads the receiver's next answer within d; a refusal is an error.
func (s *snapshotConn) await(d time.Duration) (reply, error) {
	s.c.SetReadDeadline(time.Now().Add(d))
	b, err := readFrame(s.r, maxAckFrame)
	if err != nil {
		return reply{}, fmt.Errorf("read the receiver's answer: %w", err)
	}
	rp, err := decodeReply(b)
	if err != nil {
		return reply{}, err
	}
	if rp.kind == kindRefused {
		return reply{}, fmt.Errorf("refused by the receiver: %s", rp.reason)
	}
	return rp, nil
}

// unexpected describes an answer out of turn.
func (s *snapshotConn) unexpected(rp reply) error {
	return fmt.Errorf("unexpected answer %q %d with %d of %d chunks acknowledged", rp.kind, rp.n, s.acked, s.sent)
}

// sendChunks sends size bytes of data in chunks of at most chunk bytes,
// with at most snapshotWindow of them unacknowledged.
func (s *snapshotConn) sendChunks(data io.Reader, size uint64, chunk int) error {
	buf := make([]byte, 0, chunk+chunkOverhead)
	piece := make([]byte, chunk)
	for off := uint64(0); off < size; off += uint64(chunk) {
		for s.sent-s.acked >= snapshotWindow {
			rp, err := s.await(snapshotAckTimeout)
			if err != nil {
				return err
			}
			if rp.kind != kindAck || rp.n <= s.acked || rp.n > s.sent {
				return s.unexpected(rp)
			}
			s.acked = rp.n
		}
		n := min(uint64(chunk), size-off)
		if _, err := io.ReadFull(data, piece[:n]); err != nil {
			return fmt.Errorf("read the snapshot to send at %d of %d bytes: %w", off, size, err)
		}
		buf = encodeChunk(buf[:0], s.sent, piece[:n])
		if err := s.write(buf); err != nil {
			return fmt.Errorf("write chunk %d: %w", s.sent, err)
		}
		s.sent++
	}
	return nil
}

// awaitDelivered reads the last acknowledgements, then the receiver's word
// that raft has the size bytes sent.
func (s *snapshotConn) awaitDelivered(size uint64) error {
	for {
		rp, err := s.await(snapshotDeliverTimeout)
		if err != nil {
			return err
		}
		switch {
		case rp.kind == kindAck && rp.n > s.acked && rp.n <= s.sent:
			s.acked = rp.n
		case rp.kind == kindDelivered && s.acked == s.sent && rp.n == size:
			return nil
		default:
			return s.unexpected(rp)
		}
	}
}

// serveSnapshot receives one snapshot stream from member from, whose
// hello passed its checks and whose marker was read: the header, then the
// chunks, each written to a spool file as it arrives and acknowledged.
// Raft sees the message only once the data arrived whole with the size
// and SHA-256 the header announced; a stream that breaks or lies leaves
// nothing but a log line (the spool file is removed).
func (t *TCP) serveSnapshot(c net.Conn, r *bufio.Reader, from uint64) error {
	if !t.claimSnapshotIn(from) {
		return fmt.Errorf("refused a second snapshot stream from member %d while one is open", from)
	}
	defer func() {
		t.mu.Lock()
		delete(t.snapIn, from)
		t.mu.Unlock()
	}()
	out := replier{c}
	h, m, err := t.readSnapshotHeader(r, from, out)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(t.snap.dir, fmt.Sprintf("%s%d-*%s", spoolPrefix, from, spoolSuffix))
	if err != nil {
		return out.refuse(fmt.Errorf("spool a snapshot from %d: %w", from, err))
	}
	defer os.Remove(f.Name())
	defer f.Close()
	got, sum, err := t.spoolChunks(r, f, h.size, from, out)
	var broke *streamBroke
	if errors.As(err, &broke) && !t.snap.checks && got > 0 {
		// The planted bug: what arrived is delivered as if whole.
		return t.deliverSnapshot(m, f, got, from)
	}
	if err != nil {
		return err
	}
	if t.snap.checks && sum != h.sum {
		return out.refuse(fmt.Errorf("snapshot from %d at index %d refused: %d bytes whose SHA-256 is not the one announced",
			from, m.GetSnapshot().GetMetadata().GetIndex(), got))
	}
	if err := t.deliverSnapshot(m, f, got, from); err != nil {
		return out.refuse(err)
	}
	if err := out.answer(reply{kind: kindDelivered, n: got}); err != nil {
		return fmt.Errorf("acknowledge the snapshot to %d: %w", from, err)
	}
	return nil
}

// claimSnapshotIn marks a snapshot stream from member from open; false
// when one already is.
func (t *TCP) claimSnapshotIn(from uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.snapIn[from] {
		return false
	}
	t.snapIn[from] = true
	return true
}

// replier is the receiver's side of a snapshot stream's answers.
type replier struct{ c net.Conn }

// answer sends one answer within its own deadline.
func (o replier) answer(rp reply) error {
	o.c.SetWriteDeadline(time.Now().Add(snapshotWriteTimeout))
	_, err := o.c.Write(AppendFrame(nil, encodeReply(rp)))
	return err
}

// refuse tells the sender why its stream ends, and returns err.
func (o replier) refuse(err error) error {
	o.answer(reply{kind: kindRefused, reason: err.Error()}) // best effort: the close says it too
	return err
}

// readSnapshotHeader reads and checks a snapshot stream's header: the
// raft message without its data, from member from to this one, and the
// size and SHA-256 of the data to come. A bad one is refused.
func (t *TCP) readSnapshotHeader(r *bufio.Reader, from uint64, out replier) (snapshotHeader, *raftpb.Message, error) {
	frame, err := readFrame(r, t.snap.frameLimit)
	if err != nil {
		return snapshotHeader{}, nil, fmt.Errorf("read snapshot header from %d: %w", from, err)
	}
	h, err := decodeSnapshotHeader(frame)
	if err != nil {
		return h, nil, out.refuse(fmt.Errorf("snapshot stream from %d: %w", from, err))
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(h.msg, m); err != nil {
		return h, nil, out.refuse(fmt.Errorf("decode snapshot header from %d: %w", from, err))
	}
	switch {
	case m.GetType() != raftpb.MessageType_MsgSnap || m.GetSnapshot() == nil:
		err = fmt.Errorf("snapshot stream from %d carries a %v", from, m.GetType())
	case m.GetFrom() != from || m.GetTo() != t.id:
		err = fmt.Errorf("snapshot %d->%d on the stream %d->%d", m.GetFrom(), m.GetTo(), from, t.id)
	case len(m.GetSnapshot().GetData()) != 0:
		err = fmt.Errorf("snapshot header from %d carries data", from)
	case h.size > uint64(t.snap.maxSize):
		err = fmt.Errorf("snapshot from %d announces %d bytes, over the limit of %d", from, h.size, t.snap.maxSize)
	}
	if err != nil {
		return h, nil, out.refuse(err)
	}
	return h, m, nil
}

// streamBroke is a snapshot stream that ended before its last chunk.
type streamBroke struct{ err error }

func (e *streamBroke) Error() string { return e.err.Error() }
func (e *streamBroke) Unwrap() error { return e.err }

// spoolChunks writes the stream's chunks to f as they arrive, acknowledging
// each, until size bytes came; it returns the bytes written and their
// SHA-256. A stream that breaks first is a *streamBroke.
func (t *TCP) spoolChunks(r *bufio.Reader, f io.Writer, size, from uint64, out replier) (uint64, [sha256.Size]byte, error) {
	sum := sha256.New()
	var got, seq uint64
	for got < size {
		data, err := t.readChunk(r, seq, size-got)
		if err == nil {
			if _, err := f.Write(data); err != nil {
				return got, [sha256.Size]byte{}, out.refuse(fmt.Errorf("spool a snapshot from %d: %w", from, err))
			}
			sum.Write(data)
			got += uint64(len(data))
			seq++
			err = out.answer(reply{kind: kindAck, n: seq})
		}
		if err != nil {
			return got, [sha256.Size]byte{}, &streamBroke{fmt.Errorf("snapshot stream from %d broke after %d of %d bytes: %w", from, got, size, err)}
		}
	}
	return got, [sha256.Size]byte(sum.Sum(nil)), nil
}

// readChunk reads chunk seq of a snapshot stream, which may carry at most
// left bytes.
func (t *TCP) readChunk(r *bufio.Reader, seq, left uint64) ([]byte, error) {
	frame, err := readFrame(r, t.snap.frameLimit)
	if err != nil {
		return nil, err
	}
	n, data, err := decodeChunk(frame)
	switch {
	case err != nil:
		return nil, err
	case n != seq:
		return nil, fmt.Errorf("chunk %d where %d was due", n, seq)
	case uint64(len(data)) > left:
		return nil, fmt.Errorf("chunk %d carries %d bytes where %d were left", seq, len(data), left)
	}
	return data, nil
}

// deliverSnapshot reads the spooled size bytes back into m and hands m to
// raft; the caller removes the file.
func (t *TCP) deliverSnapshot(m *raftpb.Message, f *os.File, size uint64, from uint64) error {
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !(errors.Is(err, io.EOF) && size == 0) {
		return fmt.Errorf("read back the snapshot from %d: %w", from, err)
	}
	if !t.isPeer(from) {
		return fmt.Errorf("member %d left the configuration", from)
	}
	m.Snapshot.Data = data
	t.log.Info("received snapshot", "peer", from, "index", m.GetSnapshot().GetMetadata().GetIndex(), "bytes", size)
	t.handler.Receive(m)
	return nil
}

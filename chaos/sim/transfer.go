package sim

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/member"
)

// A snapshot travels as node/peer streams it: on a stream of its own, a
// header, then chunks at the link's bandwidth, the sender waiting for an
// acknowledgement every snapWindow chunks, and the receiver hands it to
// raft only once the last chunk is in. The stream breaks when either
// direction of the link is cut, when either end goes down, or when an end
// stays paused past snapStallLimit (a write deadline); then nothing is
// delivered and the sender's core is told the snapshot failed, or raft
// would wait for it forever.
const (
	// snapChunk is smaller than production's default (1 MiB), so that a
	// table of a few thousand locks spans several chunks and a stream can
	// break with some of them spooled.
	snapChunk = 64 << 10
	// snapBandwidth is a link's throughput, bytes per simulated second.
	snapBandwidth = 200 << 20
	// snapWindow is how many chunks go unacknowledged (node/peer's 8).
	snapWindow = 8
	// snapStallLimit is how long a stream waits on a paused end.
	snapStallLimit = int64(5 * time.Second)
	// snapStallPoll is how often a stalled stream looks again.
	snapStallPoll = int64(10 * time.Millisecond)
)

// transfer is one snapshot stream in flight.
type transfer struct {
	from, to       *node
	fromInc, toInc uint64 // the incarnations of both ends at its start
	m              *raftpb.Message
	size, chunks   int
	// sending is the chunk whose arrival the next step is (0: the
	// header), spooled how many chunks the receiver has written.
	sending, spooled int
	stalledAt        int64 // 0: not stalled
	done             bool
}

// spooledBytes is the data the receiver has written so far.
func (t *transfer) spooledBytes() int { return min(t.size, t.spooled*snapChunk) }

// chunkBytes is the size of chunk i (from 1).
func (t *transfer) chunkBytes(i int) int { return min(snapChunk, t.size-(i-1)*snapChunk) }

// duration is how long the chunks take on a healthy link, after the
// header: what a fault aimed at the transfer aims inside.
func (t *transfer) duration() int64 { return int64(t.size) * int64(time.Second) / snapBandwidth }

// stream starts sending the snapshot m from member from.
func (s *sim) stream(from *node, m *raftpb.Message) {
	to := s.nodes[m.GetTo()-1]
	if s.linkCut(from.id, to.id) {
		s.dropped(from, m, "cut")
		return
	}
	size := len(m.GetSnapshot().GetData())
	t := &transfer{from: from, to: to, fromInc: from.incarnation, toInc: to.incarnation, m: m,
		size: size, chunks: (size + snapChunk - 1) / snapChunk}
	s.stats.SnapTransfers++
	if s.tr.on() {
		s.tr.printf("stream %d->%d snapshot index=%d bytes=%d chunks=%d", from.id, to.id,
			m.GetSnapshot().GetMetadata().GetIndex(), size, t.chunks)
	}
	if s.onTransfer != nil {
		s.onTransfer(t)
	}
	s.sch.after(s.oneWay(from.id, to.id), func() { s.stepTransfer(t) })
}

// linkCut: either direction between a and b is cut, so a stream between
// them (data one way, acknowledgements the other) cannot go on.
func (s *sim) linkCut(a, b uint64) bool { return s.link(a, b).cut || s.link(b, a).cut }

// oneWay is one message's latency from a to b, a net fault's delay and
// jitter included.
func (s *sim) oneWay(a, b uint64) int64 {
	l := s.link(a, b)
	lat := s.baseLatency() + l.delay
	if l.jitter > 0 {
		lat += s.rngNet.Int64N(l.jitter + 1)
	}
	return lat
}

// stepTransfer is the arrival of the header or of chunk t.sending.
func (s *sim) stepTransfer(t *transfer) {
	if t.done {
		return
	}
	if why := s.transferBroken(t); why != "" {
		s.breakTransfer(t, why)
		return
	}
	if t.from.paused || t.to.paused {
		// Nobody writes or acknowledges: the stream waits, up to a
		// deadline.
		if t.stalledAt == 0 {
			t.stalledAt = s.sch.now
		}
		s.sch.after(snapStallPoll, func() { s.stepTransfer(t) })
		return
	}
	t.stalledAt = 0
	t.spooled = t.sending
	if t.spooled == t.chunks {
		s.completeTransfer(t)
		return
	}
	t.sending++
	d := max(1, int64(t.chunkBytes(t.sending))*int64(time.Second)/snapBandwidth)
	l := s.link(t.from.id, t.to.id)
	if t.sending%snapWindow == 0 || (l.loss > 0 && s.rngNet.Float64() < l.loss) {
		// A full window waits for an acknowledgement; a lost segment
		// costs a retransmission: a round trip either way.
		d += s.oneWay(t.from.id, t.to.id) + s.oneWay(t.to.id, t.from.id)
	}
	s.sch.after(d, func() { s.stepTransfer(t) })
}

// transferBroken says why the stream cannot go on, or "".
func (s *sim) transferBroken(t *transfer) string {
	switch {
	case t.from.incarnation != t.fromInc || !t.from.up():
		return "sender down"
	case t.to.incarnation != t.toInc || !t.to.up():
		return "receiver down"
	case s.linkCut(t.from.id, t.to.id):
		return "link cut"
	case t.stalledAt != 0 && s.sch.now-t.stalledAt >= snapStallLimit:
		return "stalled"
	}
	return ""
}

// completeTransfer hands the whole snapshot to the receiver's raft; the
// sender hears of it one trip later (node/peer reports a snapshot
// delivered only on the receiver's "delivered").
func (s *sim) completeTransfer(t *transfer) {
	t.done = true
	if s.tr.on() {
		s.tr.printf("deliver %d->%d MsgSnap term=%d index=%d bytes=%d", t.from.id, t.to.id, t.m.GetTerm(),
			t.m.GetSnapshot().GetMetadata().GetIndex(), t.size)
	}
	s.input(t.to, input{kind: inStep, msg: t.m})
	s.reportTransfer(t, false)
}

// breakTransfer ends a broken stream as the network's hook says.
func (s *sim) breakTransfer(t *transfer, why string) {
	t.done = true
	s.stats.SnapTransfersBroken++
	if s.tr.on() {
		s.tr.printf("broken %d->%d snapshot index=%d after %d of %d chunks (%s)", t.from.id, t.to.id,
			t.m.GetSnapshot().GetMetadata().GetIndex(), t.spooled, t.chunks, why)
	}
	s.brokenTransfer(t)
}

// reportTransfer tells the sender's core (if it is the incarnation that
// sent it) how the snapshot went, after the answer's trip back.
func (s *sim) reportTransfer(t *transfer, failed bool) {
	from, inc := t.from, t.fromInc
	in := input{kind: inSnapReport, peer: t.to.id, failed: failed}
	lat := int64(0) // a failure is known at once: the stream broke
	if !failed {
		lat = s.oneWay(t.to.id, from.id)
	}
	s.sch.after(lat, func() {
		if from.incarnation != inc {
			return
		}
		if s.tr.on() {
			s.tr.printf("report node=%d peer=%d snapshot failed=%v", from.id, t.to.id, failed)
		}
		s.input(from, in)
	})
}

// brokenTransferHook is what a broken snapshot stream does, chosen once
// from the planted bug as member/hooks.go chooses the core's: nothing is
// delivered and the sender hears the snapshot failed; with
// snapshot-partial the receiver delivers what it spooled (production's
// peer.TCP.UnsafeSkipSnapshotChecks).
func (s *sim) brokenTransferHook(bug string) func(*transfer) {
	if bug == member.BugSnapshotPartial {
		return s.deliverPartial
	}
	return s.failTransfer
}

func (s *sim) failTransfer(t *transfer) { s.reportTransfer(t, true) }

// deliverPartial is the planted bug: a receiver still up that spooled
// some chunks hands them to raft as if whole, and the sender is told the
// snapshot arrived.
func (s *sim) deliverPartial(t *transfer) {
	if t.spooled == 0 || t.to.incarnation != t.toInc || !t.to.up() {
		s.failTransfer(t)
		return
	}
	m := proto.Clone(t.m).(*raftpb.Message)
	m.GetSnapshot().Data = m.GetSnapshot().GetData()[:t.spooledBytes()]
	s.stats.SnapPartial++
	if s.tr.on() {
		s.tr.printf("deliver %d->%d MsgSnap term=%d index=%d bytes=%d of %d (partial)", t.from.id, t.to.id, m.GetTerm(),
			m.GetSnapshot().GetMetadata().GetIndex(), t.spooledBytes(), t.size)
	}
	s.input(t.to, input{kind: inStep, msg: m})
	s.reportTransfer(t, false)
}

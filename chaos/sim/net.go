package sim

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// link is one directed member-to-member link and the faults on it.
type link struct {
	cut    bool    // partitioned: every message is lost
	delay  int64   // added latency, ns
	jitter int64   // up to this much more, drawn per message (so messages reorder)
	loss   float64 // fraction of messages dropped
	dup    float64 // fraction of messages delivered twice
	// blind loses the messages it picks by their content (an aimed
	// fault's: orphanfault.go)
	blind func(m *raftpb.Message) bool
}

// baseLatency is a healthy link's one-way latency: 100µs to 1ms, drawn per
// message, so even a healthy network reorders messages now and then.
func (s *sim) baseLatency() int64 {
	return int64(100*time.Microsecond) + s.rngNet.Int64N(int64(900*time.Microsecond))
}

func (s *sim) link(from, to uint64) *link { return s.links[[2]uint64{from, to}] }

// send puts one raft message of member from on the simulated network.
func (s *sim) send(from *node, m *raftpb.Message) {
	to := m.GetTo()
	s.stats.Messages++
	l := s.link(from.id, to)
	if l == nil {
		return
	}
	if m.GetType() == raftpb.MessageType_MsgSnap {
		s.stream(from, m) // transfer.go
		return
	}
	target := s.nodes[to-1]
	lat := s.baseLatency() + l.delay
	if l.jitter > 0 {
		lat += s.rngNet.Int64N(l.jitter + 1)
	}
	if l.cut || (l.blind != nil && l.blind(m)) || (l.loss > 0 && s.rngNet.Float64() < l.loss) {
		s.dropped(from, m, "cut")
		return
	}
	copies := 1
	if l.dup > 0 && s.rngNet.Float64() < l.dup {
		copies = 2
		s.stats.Duplicated++
	}
	if s.tr.on() {
		s.tr.printf("send %d->%d %v term=%d index=%d entries=%d lat=%dus copies=%d",
			from.id, to, m.GetType(), m.GetTerm(), m.GetIndex(), len(m.GetEntries()), lat/1000, copies)
	}
	for i := range copies {
		if i > 0 {
			lat = s.baseLatency() + l.delay + s.rngNet.Int64N(l.jitter+int64(5*time.Millisecond))
		}
		s.sch.after(lat, func() { s.deliver(from, target, m) })
	}
}

// deliver hands a message to its target if it is up; a message to a member
// that is down is lost, as on a refused connection.
func (s *sim) deliver(from *node, target *node, m *raftpb.Message) {
	if !target.up() {
		s.dropped(from, m, "down")
		return
	}
	if from.retiring && s.refusesRemoved(from, target, m) {
		return
	}
	if s.tr.on() {
		s.tr.printf("deliver %d->%d %v term=%d index=%d", from.id, target.id, m.GetType(), m.GetTerm(), m.GetIndex())
	}
	s.input(target, input{kind: inStep, msg: m})
}

// dropped accounts for a lost message and tells the sender what its
// transport would have told it: a snapshot that did not arrive failed, and
// a peer whose appends are lost is unreachable (so raft probes it again
// instead of waiting on a full window).
func (s *sim) dropped(from *node, m *raftpb.Message, why string) {
	s.stats.Dropped++
	if s.tr.on() {
		s.tr.printf("drop %d->%d %v term=%d index=%d (%s)", from.id, m.GetTo(), m.GetType(), m.GetTerm(), m.GetIndex(), why)
	}
	var in input
	switch m.GetType() {
	case raftpb.MessageType_MsgSnap:
		in = input{kind: inSnapReport, peer: m.GetTo(), failed: true}
	case raftpb.MessageType_MsgApp:
		in = input{kind: inUnreachable, peer: m.GetTo()}
	default:
		return
	}
	inc := from.incarnation
	// Not now: the sender may be in the middle of handling a Ready.
	s.sch.after(0, func() {
		if from.incarnation == inc {
			s.input(from, in)
		}
	})
}

// clientLatency is the one-way latency between a client and member n: a
// healthy link's, plus the delay of a net fault on n's links.
func (s *sim) clientLatency(n *node) int64 {
	return s.baseLatency() + n.clientDelay
}

// toClient carries something from member n back to a client.
func (s *sim) toClient(n *node, fn func()) {
	s.sch.after(s.clientLatency(n), fn)
}

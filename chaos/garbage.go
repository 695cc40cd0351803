package chaos

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node/peer"
)

// The garbage family talks to the members' peer and client ports straight,
// not through the link proxies, as an attacker on the members' network
// would: random bytes, oversized length prefixes, a peer hello that claims
// another member's id (with the right cluster id and that member's
// incarnation, read from its identity.json) followed by forged raft
// messages, and on the client port a greeting followed by malformed frames
// or frames after a wrong greeting. Everything it sends is drawn from the
// run's seed. Without TLS a member cannot tell a forged hello from its
// peer's, so the forged raft messages reach raft: the run shows whether
// they can break safety or stop a member. With TLS (members given
// --cert/--key/--ca) every one of these connections is refused at the
// handshake.

// garbageKind is one attack of the garbage families.
type garbageKind string

// The attacks.
const (
	peerRandom    garbageKind = "peer-random"    // random bytes on the peer port
	peerOversized garbageKind = "peer-oversized" // a peer frame length prefix far over the limit
	peerHello     garbageKind = "peer-hello"     // a hello naming no member, another cluster, a bad extension
	forgeApp      garbageKind = "forge-app"      // forged hello, then MsgApp with absurd index and term
	forgeTimeout  garbageKind = "forge-timeout"  // forged hello, then MsgTimeoutNow from the target's leader
	forgeVote     garbageKind = "forge-vote"     // forged hello, then a vote request with a huge term
	// Forged frames raft itself would panic on, or store unusable, unless
	// the member's Step refuses them (the planted bug no-peer-input-checks
	// removes those checks: with it these stop the target):
	forgeConflict garbageKind = "forge-conflict"  // forged hello, then appends at the target's term whose entries restart at a committed index
	forgeSnapConf garbageKind = "forge-snap-conf" // forged hello, then a snapshot whose configuration raft cannot restore
	forgeSnapData garbageKind = "forge-snap-data" // forged hello, then a snapshot whose data does not decode
	clientRandom  garbageKind = "client-random"   // random bytes on the client port
	clientFrames  garbageKind = "client-frames"   // the client greeting, then malformed frames
	clientGreet   garbageKind = "client-greet"    // a wrong greeting, then frames
	// forgeHeartbeat, a forged MsgHeartbeat at the target's term from its
	// leader with commit 2^40, once made raft panic in raftLog.commitTo
	// ("tocommit(1099511627776) is out of range"), killing every member:
	// without TLS a hello may claim another member. The member now
	// refuses a heartbeat that commits past its log
	// (member.ErrCommitBeyondLog, TestForgedCommitIndexIsRefused); the
	// garbage-heartbeat family keeps sending it so a run proves that.
	forgeHeartbeat garbageKind = "forge-heartbeat"
)

// client says whether the attack is on the client port.
func (k garbageKind) client() bool {
	return k == clientRandom || k == clientFrames || k == clientGreet
}

// garbageKinds are the attacks of the garbage family, drawn uniformly.
var garbageKinds = []garbageKind{peerRandom, peerOversized, peerHello, forgeApp, forgeTimeout, forgeVote,
	forgeConflict, forgeSnapConf, forgeSnapData, clientRandom, clientFrames, clientGreet}

// garbageUnsafeKinds are the attacks that once stopped a member without TLS.
var garbageUnsafeKinds = []garbageKind{forgeHeartbeat}

// GarbageCounts count what the garbage family sent.
type GarbageCounts struct {
	Conns   atomic.Int64 // connections opened to peer and client ports
	Refused atomic.Int64 // connections the member refused or closed before the garbage was written
	Bytes   atomic.Int64 // bytes written
	Forged  atomic.Int64 // forged raft messages written after a forged hello
	Client  atomic.Int64 // malformed client frames written
	Answers atomic.Int64 // client connections on which the member answered anything

	mu sync.Mutex
	// undecodable counts, per target member, the forged snapshots whose
	// data does not decode (forge-snap-data) that were sent or tried: the
	// most raftlock_snapshots_corrupt_total may count at that member from
	// the garbage alone (the snapshot-integrity check).
	undecodable map[int]int
}

// noteUndecodable counts one forged undecodable snapshot sent to id.
func (c *GarbageCounts) noteUndecodable(id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.undecodable == nil {
		c.undecodable = map[int]int{}
	}
	c.undecodable[id]++
}

// Undecodable returns, per member, the forged snapshots whose data does
// not decode that were sent to it or tried.
func (c *GarbageCounts) Undecodable() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.undecodable)
}

// String summarises the counts for the log and the summary.
func (c *GarbageCounts) String() string {
	return fmt.Sprintf("%d connections (%d refused), %d bytes, %d forged raft messages, %d malformed client frames, %d client connections answered",
		c.Conns.Load(), c.Refused.Load(), c.Bytes.Load(), c.Forged.Load(), c.Client.Load(), c.Answers.Load())
}

// garbage starts sending garbage to some members until its heal.
func (n *Nemesis) garbage(ctx context.Context, rng *rand.Rand, g fault.Garbage, kinds []garbageKind) (func(context.Context), string) {
	g.Record(n.Rec)
	grng := rand.New(rand.NewPCG(n.Seed, rng.Uint64()))
	gctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for gctx.Err() == nil {
			id := g.Nodes[grng.IntN(len(g.Nodes))]
			kind := kinds[grng.IntN(len(kinds))]
			n.sendGarbage(gctx, grng, id, kind)
			sleep(gctx, time.Duration(5+grng.IntN(20))*time.Millisecond)
		}
	}()
	return func(context.Context) {
		stop()
		wg.Wait()
		g.End = true
		g.Record(n.Rec)
	}, fmt.Sprintf("%s %v", g.Family, g.Nodes)
}

// sendGarbage opens one connection to member id and sends one attack.
func (n *Nemesis) sendGarbage(ctx context.Context, rng *rand.Rand, id int, kind garbageKind) {
	addr := n.Sup.PeerAddr(id)
	if kind.client() {
		addr = n.Sup.ClientAddr(id)
	}
	d := net.Dialer{Timeout: 300 * time.Millisecond}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return // the member is down or paused past its backlog
	}
	defer c.Close()
	n.Garbage.Conns.Add(1)
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	var b []byte
	switch kind {
	case peerRandom, clientRandom:
		b = randomBytes(rng, 1+rng.IntN(4096))
	case peerOversized:
		b = binary.BigEndian.AppendUint32(nil, uint32(64<<20+1+rng.IntN(1<<30)))
		b = append(b, randomBytes(rng, rng.IntN(256))...)
	case peerHello:
		b = n.badHello(rng, id)
	case clientFrames:
		b = append([]byte(wire.Greeting), malformedClientFrames(rng, n)...)
	case clientGreet:
		greets := []string{"RAFTLOCK/9\n", "RAFTLOCK/1\r\n", "GET / HTTP/1.1\r\n\r\n", "RLP1"}
		b = append([]byte(greets[rng.IntN(len(greets))]), malformedClientFrames(rng, n)...)
	default: // forge-*
		b = n.forged(ctx, rng, id, kind)
		if b == nil {
			return
		}
		if kind == forgeSnapData {
			// Counted before the write: a write that fails may still have
			// reached the member, and the count must bound what it saw.
			n.Garbage.noteUndecodable(id)
		}
	}
	if _, err := c.Write(b); err != nil {
		n.Garbage.Refused.Add(1)
		return
	}
	n.Garbage.Bytes.Add(int64(len(b)))
	if kind.client() {
		// Read what the member says (its greeting, an error frame) until it
		// closes: the connection must end, not hang the member.
		if k, _ := io.Copy(io.Discard, bufio.NewReader(c)); k > 0 {
			n.Garbage.Answers.Add(1)
		}
		return
	}
	// Give the member a moment to take the frames in before closing.
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	io.Copy(io.Discard, c)
}

func randomBytes(rng *rand.Rand, k int) []byte {
	b := make([]byte, k)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// malformedClientFrames are frames no member may act on: shorter than a
// header, of an unknown opcode (never a request opcode, so a frame can
// never be a real acquire or release the history does not show), with a
// truncated body, or over the frame limit.
func malformedClientFrames(rng *rand.Rand, n *Nemesis) []byte {
	var b []byte
	for range 1 + rng.IntN(4) {
		n.Garbage.Client.Add(1)
		switch rng.IntN(4) {
		case 0: // shorter than a header
			b = peer.AppendFrame(b, randomBytes(rng, rng.IntN(9)))
		case 1: // an opcode that is no request
			body := append([]byte{[]byte{0x00, 0x3f, 0x7e, 0xff}[rng.IntN(4)]}, randomBytes(rng, 8+rng.IntN(64))...)
			b = peer.AppendFrame(b, body)
		case 2: // a length the body never reaches
			b = binary.BigEndian.AppendUint32(b, uint32(wire.MaxFrame))
			b = append(b, 0x00)
			return append(b, randomBytes(rng, rng.IntN(64))...)
		default: // over the limit
			b = binary.BigEndian.AppendUint32(b, uint32(wire.MaxFrame+1+rng.IntN(1<<30)))
			return append(b, randomBytes(rng, rng.IntN(64))...)
		}
	}
	return b
}

// badHello is a peer hello the member must refuse: no member, another
// cluster, a truncated or trailing extension, or one addressed elsewhere.
func (n *Nemesis) badHello(rng *rand.Rand, id int) []byte {
	other := n.otherMember(rng, id)
	ext := func(cluster, inc uint64) []byte {
		e := binary.AppendUvarint(nil, cluster)
		e = binary.AppendUvarint(e, inc)
		return binary.AppendUvarint(e, 0)
	}
	var h []byte
	switch rng.IntN(4) {
	case 0:
		h = append(peer.EncodeHello(uint64(100+rng.IntN(1000)), uint64(id), "127.0.0.1:1"), ext(n.Sup.ClusterID(), 1)...)
	case 1:
		h = append(peer.EncodeHello(uint64(other), uint64(id), "127.0.0.1:1"), ext(n.Sup.ClusterID()^1, n.Sup.Incarnation(other))...)
	case 2:
		h = append(peer.EncodeHello(uint64(other), uint64(id), "127.0.0.1:1"), 0xff)
	default:
		h = append(peer.EncodeHello(uint64(other), uint64(other), "127.0.0.1:1"), ext(n.Sup.ClusterID(), n.Sup.Incarnation(other))...)
	}
	return peer.AppendFrame(nil, h)
}

func (n *Nemesis) otherMember(rng *rand.Rand, id int) int {
	ids := n.Sup.IDs()
	for {
		if o := ids[rng.IntN(len(ids))]; o != id {
			return o
		}
	}
}

// forged is a hello claiming another member (the target's leader when it
// has one) with the right cluster id and that member's incarnation, then
// forged raft messages of the kind. nil when the target does not answer
// its status (down or paused).
func (n *Nemesis) forged(ctx context.Context, rng *rand.Rand, id int, kind garbageKind) []byte {
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	st, err := n.Sup.StatusOf(sctx, id)
	cancel()
	if err != nil {
		return nil
	}
	f := forgery{rng: rng, st: st, from: int(st.Leader), to: id, term: st.Term}
	if f.from == 0 || f.from == id {
		f.from = n.otherMember(rng, id)
	}
	// The term at which raft takes an append or a snapshot from from:
	// the target's own when from is its leader (or it has none); one more
	// when the target leads, so that it steps down and takes the frame.
	if int(st.Leader) == id {
		f.term++
	}
	ext := binary.AppendUvarint(nil, n.Sup.ClusterID())
	ext = binary.AppendUvarint(ext, n.Sup.Incarnation(f.from))
	ext = binary.AppendUvarint(ext, 0)
	b := peer.AppendFrame(nil, append(peer.EncodeHello(uint64(f.from), uint64(id), n.Sup.ClientAddr(f.from)), ext...))
	var msgs []*raftpb.Message
	switch kind {
	case forgeHeartbeat:
		h := f.msg(raftpb.MessageType_MsgHeartbeat, st.Term)
		h.Commit = proto.Uint64(1 << 40)
		msgs = append(msgs, h)
	case forgeApp:
		msgs = append(msgs, f.app())
	case forgeTimeout:
		msgs = append(msgs, f.msg(raftpb.MessageType_MsgTimeoutNow, st.Term))
	case forgeConflict:
		msgs = f.conflict()
	case forgeSnapConf:
		// raft panics restoring it ("removed all voters"); the data
		// decodes, so only the configuration check refuses it.
		s := f.snapshot()
		s.Snapshot.Metadata.ConfState = unrestorableConf(rng, uint64(id))
		s.Snapshot.Data = member.EncodeSnapshot(fsm.New().Snapshot(), member.Book{})
		msgs = append(msgs, s)
	case forgeSnapData:
		// A configuration raft restores; data that does not decode, which
		// raft has the member store before it fails to apply it.
		s := f.snapshot()
		s.Snapshot.Metadata.ConfState = n.restorableConf(st, uint64(id))
		s.Snapshot.Data = undecodableSnapshot(rng)
		msgs = append(msgs, s)
	default: // forgeVote
		v := f.msg(raftpb.MessageType_MsgVote, st.Term+1<<30+rng.Uint64N(1<<40))
		v.Index = proto.Uint64(1 << 40)
		v.LogTerm = proto.Uint64(1 << 45)
		msgs = append(msgs, v)
	}
	for _, msg := range msgs {
		p, err := proto.Marshal(msg)
		if err != nil {
			continue
		}
		b = peer.AppendFrame(b, p)
		n.Garbage.Forged.Add(1)
	}
	return b
}

// forgery is what forged messages to one member are made of: the
// target's status, the member they claim to come from, and the term at
// which the target takes an append or a snapshot from it.
type forgery struct {
	rng      *rand.Rand
	st       wire.Status
	from, to int
	term     uint64
}

func (f forgery) msg(t raftpb.MessageType, term uint64) *raftpb.Message {
	return &raftpb.Message{Type: t.Enum(), From: proto.Uint64(uint64(f.from)), To: proto.Uint64(uint64(f.to)), Term: proto.Uint64(term)}
}

// app is an append with absurd index and term.
func (f forgery) app() *raftpb.Message {
	a := f.msg(raftpb.MessageType_MsgApp, f.st.Term+1+f.rng.Uint64N(1<<50))
	a.Index = proto.Uint64(1<<40 + f.rng.Uint64N(1<<40))
	a.LogTerm = proto.Uint64(1 << 45)
	a.Commit = proto.Uint64(1 << 40)
	a.Entries = []*raftpb.Entry{{Term: proto.Uint64(1 << 45), Index: proto.Uint64(a.GetIndex() + 1), Type: raftpb.EntryType_EntryNormal.Enum(), Data: randomBytes(f.rng, 16)}}
	return a
}

// conflict: raft takes an append whose (index, term) matches its log at
// or past its commit, then assumes the entries follow: one that restarts
// at a committed index (with a term never used) panics ("entry N conflict
// with committed entry"). The target's commit moves on while the frames
// travel, and the entries past it are of its leader's term: one append
// per index from the commit it reported, so one of them matches.
func (f forgery) conflict() []*raftpb.Message {
	at := 1 + f.rng.Uint64N(max(f.st.Commit, 1))
	ents := []*raftpb.Entry{{Term: proto.Uint64(f.term + 1), Index: proto.Uint64(at), Type: raftpb.EntryType_EntryNormal.Enum()}}
	var msgs []*raftpb.Message
	for k := range uint64(16) {
		a := f.msg(raftpb.MessageType_MsgApp, f.term)
		a.Index, a.LogTerm, a.Commit = proto.Uint64(f.st.Commit+k), proto.Uint64(f.st.Term), proto.Uint64(f.st.Commit)
		a.Entries = ents
		msgs = append(msgs, a)
	}
	return msgs
}

// snapshot is a snapshot past the target's commit, so raft restores it
// rather than ignoring it; the caller names the target in its
// configuration, so raft does not drop it, and gives it its data.
func (f forgery) snapshot() *raftpb.Message {
	s := f.msg(raftpb.MessageType_MsgSnap, f.term)
	md := &raftpb.SnapshotMetadata{Index: proto.Uint64(f.st.Commit + 1<<16 + f.rng.Uint64N(1<<16)), Term: proto.Uint64(f.term)}
	s.Snapshot = &raftpb.Snapshot{Metadata: md}
	return s
}

// unrestorableConf is a single (never joint) configuration naming id that
// raft cannot restore: it leaves no voter once restored one change at a
// time.
func unrestorableConf(rng *rand.Rand, id uint64) *raftpb.ConfState {
	switch rng.IntN(3) {
	case 0: // id only a learner
		return &raftpb.ConfState{Learners: []uint64{id}}
	case 1: // id a voter and a learner
		return &raftpb.ConfState{Voters: []uint64{id}, Learners: []uint64{id}}
	default: // a zero voter
		return &raftpb.ConfState{Voters: []uint64{0}, Learners: []uint64{id}}
	}
}

// restorableConf is the configuration the target reported (the harness's
// members if it reported none), naming the target.
func (n *Nemesis) restorableConf(st wire.Status, id uint64) *raftpb.ConfState {
	voters, learners := slices.Clone(st.Voters), slices.Clone(st.Learners)
	if len(voters) == 0 {
		for _, o := range n.Sup.IDs() {
			voters = append(voters, uint64(o))
		}
	}
	if !slices.Contains(voters, id) && !slices.Contains(learners, id) {
		voters = append(voters, id)
	}
	return &raftpb.ConfState{Voters: voters, Learners: learners}
}

// undecodableSnapshot is snapshot data no member can decode: random bytes,
// the format's header with a wrong checksum, or a well-formed envelope
// around a lock table that does not decode. Drawn until it does not
// decode, so the frame is refused by the data check alone.
func undecodableSnapshot(rng *rand.Rand) []byte {
	for {
		var b []byte
		switch rng.IntN(3) {
		case 0:
			b = randomBytes(rng, 1+rng.IntN(512))
		case 1:
			b = member.EncodeSnapshot(fsm.New().Snapshot(), member.Book{})
			b[len(b)-1-rng.IntN(4)] ^= byte(1 + rng.IntN(255))
		default:
			b = member.EncodeSnapshot(randomBytes(rng, rng.IntN(64)), member.Book{})
		}
		if _, _, _, err := member.DecodeSnapshot(b); err != nil {
			return b
		}
	}
}

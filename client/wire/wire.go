// Package wire is raftlock's client protocol: length-prefixed binary frames
// over TCP, each request carrying an id, many in flight per connection, and
// answers in any order. node/ serves it and client/ speaks it.
//
// A frame is a 4-byte big-endian length, then the body: a 1-byte opcode, an
// 8-byte big-endian request id, and the opcode's fields (unsigned varints;
// strings as a varint length and bytes).
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/raftlock/raftlock/internal/binread"
	"github.com/raftlock/raftlock/internal/memberstatus"
)

// Op is a frame's opcode. Requests are below 0x80, answers above.
type Op uint8

// Requests.
const (
	OpAcquire Op = 0x01 // Key, LeaseMS, WaitMS, Tag, Owner (optional)
	OpRelease Op = 0x02 // Key, Token, Tag (optional on decode), Force (optional)
	OpRenew   Op = 0x03 // Key, Token, LeaseMS, Tag (optional on decode)
	OpGet     Op = 0x04 // Key, Stale
	OpStatus  Op = 0x05 // Features (optional on decode; see below)
	OpCancel  Op = 0x06 // ID names the request to cancel; no answer
	// OpAdmin runs an operator command (Key names it: "member.list",
	// "member.add", ...) with a JSON Body; the answer is OpAdminResult
	// with a JSON Body, or an error answer. It needs the admin right.
	OpAdmin Op = 0x07 // Key (command), Body
	// OpList pages the held locks in key order: up to Limit (0: the
	// member's default) whose keys start with Prefix, after the key After.
	OpList Op = 0x08 // Prefix, After, Limit, Stale
	// OpWatch streams the lock events under Prefix: OpWatching first,
	// then an OpEvent per event, all under the request's id, until an
	// error answer ends the stream (OpOverloaded: the reader fell behind)
	// or the client cancels it. Only from a client that announced
	// FeatureWatch; a member from before it closes the connection at the
	// unknown opcode, so a client watches on a connection of its own.
	// With WatchAfter (optional on decode) it resumes after that
	// revision: the member replays what it holds since, or answers
	// OpCompacted when it no longer holds it.
	OpWatch Op = 0x09 // Prefix, WatchAfter (optional)
	// OpForward is a request a member relays to the leader on behalf of
	// a client it verified: the client's identity, then the relayed
	// request's frame body (op, id and fields; its id is the envelope's).
	// Only a member's certificate may send one (a member from before it
	// answers it InvalidArgument). Request carries it as Forwarded and
	// Behalf, beside the relayed request's own fields.
	OpForward Op = 0x0a // Behalf, request
)

// A status request with non-zero Features is no status request: it tells
// the member which answers this client understands, and gets no answer. A
// client sends it first on each connection; a member that predates it
// answers InvalidArgument (trailing bytes) under an id nobody waits for,
// and keeps the connection.

// Feature bits of a status request's Features.
const (
	// FeaturePermissionDenied: the client decodes OpPermissionDenied. A
	// client that has not said so is refused with OpError, whose reason
	// every client prints.
	FeaturePermissionDenied uint64 = 1 << 0
	// FeatureWatch: the client decodes OpWatching and OpEvent. A member
	// answers OpWatch from a client that has not said so with
	// OpInvalidArgument.
	FeatureWatch uint64 = 1 << 1
)

// Answers.
const (
	OpGranted         Op = 0x81 // Token, LeaseMS
	OpHeld            Op = 0x82
	OpReleased        Op = 0x83 // Token (optional: a forced release's)
	OpRenewed         Op = 0x84
	OpNotFound        Op = 0x85
	OpValue           Op = 0x86 // Held, Token, RemainingMS, Owner (optional)
	OpRedirect        Op = 0x87 // LeaderID, Leader (client address)
	OpUnavailable     Op = 0x88 // Reason
	OpInvalidArgument Op = 0x89 // Reason
	OpOutcomeUnknown  Op = 0x8a // Reason
	OpError           Op = 0x8b // Reason
	OpStatusInfo      Op = 0x8c // Status
	// OpPermissionDenied: the client's identity may not make this request
	// (the member's ACL). Sent only to clients that announced
	// FeaturePermissionDenied.
	OpPermissionDenied Op = 0x8d // Reason
	// OpOverloaded: a limit of the member was reached and nothing was
	// proposed; the call is safe to retry after a backoff.
	OpOverloaded Op = 0x8e // Reason
	// OpAdminResult answers OpAdmin.
	OpAdminResult Op = 0x8f // Body
	// OpLocks answers OpList.
	OpLocks Op = 0x90 // Locks, More
	// OpWatching starts a watch's stream: the index the member had
	// applied when it began (its events come after it).
	OpWatching Op = 0x91 // From
	// OpEvent is one lock event of a watch.
	OpEvent Op = 0x92 // Event: Key, Type, Token, Owner, LeaseMS, Index, Seq (optional)
	// OpCompacted ends (or refuses) a watch whose member no longer holds
	// the events after its revision: Kept is the revision after which it
	// holds every event. Only a watch that asked for a revision gets it,
	// or one its member caught up past by snapshot, from a client that
	// announced FeatureWatch.
	OpCompacted Op = 0x93 // Reason, Kept
)

// GoAwayID is the request id of a goaway: an OpUnavailable answer a
// member sends unasked when it is stopping. The client sends nothing more
// on that connection and closes it once its requests in flight are
// answered (the member keeps answering them); request ids start at 1.
const GoAwayID = 0

// Limits.
const (
	MaxFrame     = 64 << 10
	maxString    = 4096
	headerLength = 1 + 8
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("wire: malformed frame")

// Request is one client request.
type Request struct {
	ID      uint64
	Op      Op
	Key     string
	LeaseMS uint64
	WaitMS  uint64
	Tag     uint64
	Token   uint64
	Stale   bool
	// Features is a status request's announcement of the answers this
	// client understands (Feature* bits).
	Features uint64
	// Body is an admin request's JSON arguments.
	Body []byte
	// Owner says who acquires (at most MaxOwnerLen bytes).
	Owner string
	// Force makes a release free the key whatever its token (the admin
	// right is needed).
	Force bool
	// Prefix, After and Limit page a list.
	Prefix string
	After  string
	Limit  uint64
	// WatchAfter is the revision a watch resumes after (zero: from now).
	WatchAfter Revision
	// Forwarded marks a request a member relays for the client Behalf
	// ("": one without an identity), sent as OpForward.
	Forwarded bool
	Behalf    string
}

// forwardable says whether a request of op may travel in an OpForward:
// a call with one answer, never a cancel, a watch, an announcement or
// another envelope.
func forwardable(op Op) bool {
	switch op {
	case OpAcquire, OpRelease, OpRenew, OpGet, OpList, OpAdmin, OpStatus:
		return true
	}
	return false
}

// Lock is one held lock of a list answer. Its JSON is a listed lock of
// the HTTP API and of raftlock list --json.
type Lock struct {
	Key         string `json:"key"`
	Token       uint64 `json:"token"`
	Owner       string `json:"owner"`
	RemainingMS uint64 `json:"remaining_ms"`
}

// Status is a member's self-description (memberstatus.Status, the
// member core's own).
type Status = memberstatus.Status

// Response is one answer.
type Response struct {
	ID          uint64
	Op          Op
	Token       uint64
	LeaseMS     uint64
	Held        bool
	RemainingMS uint64
	LeaderID    uint64
	Leader      string
	Reason      string
	Status      Status
	Body        []byte   // an admin answer's JSON
	Owner       string   // a Value's
	Locks       []Lock   // a list's page
	More        bool     // a list: more locks follow the page
	From        uint64   // a watch's start (OpWatching)
	Event       Event    // a watch's event (OpEvent)
	Kept        Revision // OpCompacted's: after which revision the member holds every event
}

// AppendRequest appends r as a frame to b: an OpForward envelope around
// it when r.Forwarded.
func AppendRequest(b []byte, r *Request) []byte {
	if r.Forwarded {
		inner := *r
		inner.Forwarded, inner.Behalf = false, ""
		start := len(b)
		b = append(b, 0, 0, 0, 0, byte(OpForward))
		b = binary.BigEndian.AppendUint64(b, r.ID)
		b = appendString(b, r.Behalf)
		body := AppendRequest(nil, &inner)[4:]
		b = appendBytes(b, body)
		binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
		return b
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0, byte(r.Op))
	b = binary.BigEndian.AppendUint64(b, r.ID)
	switch r.Op {
	case OpAcquire:
		b = appendString(b, r.Key)
		b = binary.AppendUvarint(b, r.LeaseMS)
		b = binary.AppendUvarint(b, r.WaitMS)
		b = binary.AppendUvarint(b, r.Tag)
		if r.Owner != "" {
			b = appendString(b, r.Owner)
		}
	case OpRelease:
		b = appendString(b, r.Key)
		b = binary.AppendUvarint(b, r.Token)
		b = binary.AppendUvarint(b, r.Tag)
		if r.Force {
			b = appendBool(b, true)
		}
	case OpRenew:
		b = appendString(b, r.Key)
		b = binary.AppendUvarint(b, r.Token)
		b = binary.AppendUvarint(b, r.LeaseMS)
		b = binary.AppendUvarint(b, r.Tag)
	case OpGet:
		b = appendString(b, r.Key)
		b = appendBool(b, r.Stale)
	case OpStatus:
		if r.Features != 0 {
			b = binary.AppendUvarint(b, r.Features)
		}
	case OpAdmin:
		b = appendString(b, r.Key)
		b = appendBytes(b, r.Body)
	case OpList:
		b = appendString(b, r.Prefix)
		b = appendString(b, r.After)
		b = binary.AppendUvarint(b, r.Limit)
		b = appendBool(b, r.Stale)
	case OpWatch:
		b = appendString(b, r.Prefix)
		if r.WatchAfter != (Revision{}) {
			b = binary.AppendUvarint(b, r.WatchAfter.Index)
			b = binary.AppendUvarint(b, uint64(r.WatchAfter.Seq))
		}
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// AppendResponse appends r as a frame to b.
func AppendResponse(b []byte, r *Response) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, byte(r.Op))
	b = binary.BigEndian.AppendUint64(b, r.ID)
	switch r.Op {
	case OpGranted:
		b = binary.AppendUvarint(b, r.Token)
		b = binary.AppendUvarint(b, r.LeaseMS)
	case OpReleased:
		if r.Token != 0 {
			b = binary.AppendUvarint(b, r.Token)
		}
	case OpValue:
		b = appendBool(b, r.Held)
		b = binary.AppendUvarint(b, r.Token)
		b = binary.AppendUvarint(b, r.RemainingMS)
		if r.Owner != "" {
			b = appendString(b, r.Owner)
		}
	case OpLocks:
		b = binary.AppendUvarint(b, uint64(len(r.Locks)))
		for _, l := range r.Locks {
			b = appendString(b, l.Key)
			b = binary.AppendUvarint(b, l.Token)
			b = appendString(b, l.Owner)
			b = binary.AppendUvarint(b, l.RemainingMS)
		}
		b = appendBool(b, r.More)
	case OpRedirect:
		b = binary.AppendUvarint(b, r.LeaderID)
		b = appendString(b, r.Leader)
	case OpUnavailable, OpInvalidArgument, OpOutcomeUnknown, OpError, OpPermissionDenied, OpOverloaded:
		b = appendString(b, r.Reason)
	case OpStatusInfo:
		s := &r.Status
		for _, v := range []uint64{s.ID, s.Term, s.Leader, s.Commit, s.Applied, s.Locks, s.LastToken} {
			b = binary.AppendUvarint(b, v)
		}
		for _, v := range []string{s.Addr, s.Role, s.LeaderAddr, s.Digest} {
			b = appendString(b, v)
		}
		if len(s.Voters)+len(s.Learners) > 0 {
			b = appendIDs(b, s.Voters)
			b = appendIDs(b, s.Learners)
		}
	case OpAdminResult:
		b = appendBytes(b, r.Body)
	case OpWatching:
		b = binary.AppendUvarint(b, r.From)
	case OpEvent:
		e := &r.Event
		b = appendString(b, e.Key)
		b = append(b, byte(e.Type))
		b = binary.AppendUvarint(b, e.Token)
		b = appendString(b, e.Owner)
		b = binary.AppendUvarint(b, e.LeaseMS)
		b = binary.AppendUvarint(b, e.Index)
		if e.Seq != 0 {
			b = binary.AppendUvarint(b, uint64(e.Seq))
		}
	case OpCompacted:
		b = appendString(b, r.Reason)
		b = binary.AppendUvarint(b, r.Kept.Index)
		b = binary.AppendUvarint(b, uint64(r.Kept.Seq))
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// DecodeRequest decodes a request frame body.
func DecodeRequest(body []byte) (Request, error) {
	d, op, id, err := header(body)
	if err != nil {
		return Request{}, err
	}
	r := Request{ID: id, Op: op}
	switch op {
	case OpAcquire:
		r.Key, r.LeaseMS, r.WaitMS, r.Tag = d.string(), d.Uvarint(), d.Uvarint(), d.Uvarint()
		r.Owner = d.optionalString()
	case OpRelease:
		r.Key, r.Token, r.Tag = d.string(), d.Uvarint(), d.optionalUvarint()
		r.Force = d.optionalBool()
	case OpRenew:
		r.Key, r.Token, r.LeaseMS, r.Tag = d.string(), d.Uvarint(), d.Uvarint(), d.optionalUvarint()
	case OpGet:
		r.Key, r.Stale = d.string(), d.bool()
	case OpStatus:
		r.Features = d.optionalUvarint()
	case OpCancel:
	case OpAdmin:
		r.Key, r.Body = d.string(), d.bytes()
	case OpList:
		r.Prefix, r.After, r.Limit, r.Stale = d.string(), d.string(), d.Uvarint(), d.bool()
	case OpWatch:
		r.Prefix = d.string()
		if len(d.Buf) > 0 {
			r.WatchAfter.Index = d.Uvarint()
			r.WatchAfter.Seq = d.seq()
		}
	case OpForward:
		behalf, body := d.string(), d.bytes()
		if err := d.Finish(); err != nil {
			return Request{}, err
		}
		inner, err := DecodeRequest(body)
		if err != nil {
			return Request{}, fmt.Errorf("forwarded request: %w", err)
		}
		if inner.Forwarded || !forwardable(inner.Op) || (inner.Op == OpStatus && inner.Features != 0) {
			return Request{}, fmt.Errorf("%w: request opcode 0x%02x cannot be forwarded", ErrMalformed, uint8(inner.Op))
		}
		inner.ID, inner.Forwarded, inner.Behalf = id, true, behalf
		return inner, nil
	default:
		return Request{}, fmt.Errorf("%w: unknown request opcode 0x%02x", ErrMalformed, uint8(op))
	}
	return r, d.Finish()
}

// DecodeResponse decodes an answer frame body.
func DecodeResponse(body []byte) (Response, error) {
	d, op, id, err := header(body)
	if err != nil {
		return Response{}, err
	}
	r := Response{ID: id, Op: op}
	switch op {
	case OpGranted:
		r.Token, r.LeaseMS = d.Uvarint(), d.Uvarint()
	case OpReleased:
		r.Token = d.optionalUvarint()
	case OpHeld, OpRenewed, OpNotFound:
	case OpValue:
		r.Held, r.Token, r.RemainingMS = d.bool(), d.Uvarint(), d.Uvarint()
		r.Owner = d.optionalString()
	case OpLocks:
		n := d.Uvarint()
		// Every lock takes at least four bytes: a count past that is a lie.
		if d.Err == nil && n > uint64(len(d.Buf))/4 {
			d.Fail("list of %d locks in %d bytes", n, len(d.Buf))
		}
		if d.Err == nil && n > 0 {
			r.Locks = make([]Lock, 0, n)
		}
		for i := uint64(0); i < n && d.Err == nil; i++ {
			r.Locks = append(r.Locks, Lock{Key: d.string(), Token: d.Uvarint(), Owner: d.string(), RemainingMS: d.Uvarint()})
		}
		r.More = d.bool()
	case OpRedirect:
		r.LeaderID, r.Leader = d.Uvarint(), d.string()
	case OpUnavailable, OpInvalidArgument, OpOutcomeUnknown, OpError, OpPermissionDenied, OpOverloaded:
		r.Reason = d.string()
	case OpStatusInfo:
		s := &r.Status
		for _, v := range []*uint64{&s.ID, &s.Term, &s.Leader, &s.Commit, &s.Applied, &s.Locks, &s.LastToken} {
			*v = d.Uvarint()
		}
		for _, v := range []*string{&s.Addr, &s.Role, &s.LeaderAddr, &s.Digest} {
			*v = d.string()
		}
		if d.Err == nil && len(d.Buf) > 0 {
			s.Voters, s.Learners = d.ids(), d.ids()
		}
	case OpAdminResult:
		r.Body = d.bytes()
	case OpWatching:
		r.From = d.Uvarint()
	case OpEvent:
		e := &r.Event
		e.Key, e.Type = d.string(), d.eventType()
		e.Token, e.Owner, e.LeaseMS, e.Index = d.Uvarint(), d.string(), d.Uvarint(), d.Uvarint()
		e.Seq = d.seq()
	case OpCompacted:
		r.Reason, r.Kept.Index = d.string(), d.Uvarint()
		r.Kept.Seq = d.seq()
	default:
		return Response{}, fmt.Errorf("%w: unknown answer opcode 0x%02x", ErrMalformed, uint8(op))
	}
	return r, d.Finish()
}

func header(body []byte) (*decoder, Op, uint64, error) {
	if len(body) < headerLength {
		return nil, 0, 0, fmt.Errorf("%w: %d bytes is shorter than a header", ErrMalformed, len(body))
	}
	return &decoder{binread.Reader{Buf: body[headerLength:], Malformed: ErrMalformed}}, Op(body[0]), binary.BigEndian.Uint64(body[1:9]), nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendIDs(b []byte, ids []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// decoder reads fields with a sticky error (binread), failing with
// ErrMalformed.
type decoder struct{ binread.Reader }

// optionalUvarint reads a trailing field that older clients do not send.
func (d *decoder) optionalUvarint() uint64 {
	if d.Err != nil || len(d.Buf) == 0 {
		return 0
	}
	return d.Uvarint()
}

// seq reads an event's place in its index (wire.Revision.Seq), a
// trailing uvarint that fits 32 bits; 0 when absent.
func (d *decoder) seq() uint32 {
	v := d.optionalUvarint()
	if v > math.MaxUint32 {
		d.Fail("event sequence out of range")
		return 0
	}
	return uint32(v)
}

// optionalString reads a trailing string that older peers do not send.
func (d *decoder) optionalString() string {
	if d.Err != nil || len(d.Buf) == 0 {
		return ""
	}
	return d.string()
}

// optionalBool reads a trailing bool that older peers do not send.
func (d *decoder) optionalBool() bool {
	if d.Err != nil || len(d.Buf) == 0 {
		return false
	}
	return d.bool()
}

func (d *decoder) string() string {
	n := d.Uvarint()
	switch {
	case d.Err != nil:
		return ""
	case n > maxString:
		d.Fail("string of %d bytes exceeds %d", n, maxString)
		return ""
	case n > uint64(len(d.Buf)):
		d.Fail("truncated string")
		return ""
	}
	s := string(d.Buf[:n])
	d.Buf = d.Buf[n:]
	return s
}

// bytes reads a length-prefixed byte string (bounded by the frame).
func (d *decoder) bytes() []byte {
	n := d.Uvarint()
	switch {
	case d.Err != nil:
		return nil
	case n > uint64(len(d.Buf)):
		d.Fail("truncated bytes")
		return nil
	}
	v := append([]byte(nil), d.Buf[:n]...)
	d.Buf = d.Buf[n:]
	return v
}

// maxIDs bounds a member id list: no configuration is that large.
const maxIDs = 1024

func (d *decoder) ids() []uint64 {
	n := d.Uvarint()
	if d.Err == nil && (n > maxIDs || n > uint64(len(d.Buf))) {
		d.Fail("id list of %d entries", n)
	}
	if d.Err != nil || n == 0 {
		return nil
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = d.Uvarint()
	}
	return ids
}

func (d *decoder) bool() bool {
	if d.Err != nil {
		return false
	}
	if len(d.Buf) < 1 || d.Buf[0] > 1 {
		d.Fail("bad bool")
		return false
	}
	v := d.Buf[0] == 1
	d.Buf = d.Buf[1:]
	return v
}

// eventType reads an event's type: one byte, a known one (an unknown one
// would be printed as nothing a reader could act on).
func (d *decoder) eventType() EventType {
	t := EventType(d.Byte())
	if d.Err == nil && (t < EventGranted || t > EventExpired) {
		d.Fail("unknown lock event %d", uint8(t))
	}
	return t
}

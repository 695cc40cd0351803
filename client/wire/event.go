package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// EventType is what a lock event says happened to its lock: the same
// numbers as the member core's (member.EventType), kept equal by a test in
// node/server.
type EventType uint8

// The lock events of a watch. A forced release is EventReleased.
const (
	EventGranted  EventType = 1
	EventRenewed  EventType = 2
	EventReleased EventType = 3
	EventExpired  EventType = 4
)

var eventNames = [...]string{EventGranted: "granted", EventRenewed: "renewed", EventReleased: "released", EventExpired: "expired"}

// String is the event's name, as watches print it.
func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// MarshalText writes the event's name in JSON.
func (t EventType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads an event's name.
func (t *EventType) UnmarshalText(b []byte) error {
	for i, n := range eventNames {
		if n != "" && n == string(b) {
			*t = EventType(i)
			return nil
		}
	}
	return fmt.Errorf("unknown lock event %q", b)
}

// Event is one lock event of a watch: what the command applied at Index
// did to the lock on Key. Its JSON is the one object per event of the
// HTTP API's Server-Sent Events and of raftlock watch --json.
type Event struct {
	Key     string    `json:"key"`
	Type    EventType `json:"type"`
	Token   uint64    `json:"token"`
	Owner   string    `json:"owner"`
	LeaseMS uint64    `json:"lease_ms"`
	Index   uint64    `json:"index"`
	// Seq is the event's place among its index's events (from 0): an
	// entry of a batch makes several. (Index, Seq) is its revision.
	Seq uint32 `json:"seq,omitempty"`
}

// Revision is the event's revision, after which a watch may resume.
func (e Event) Revision() Revision { return Revision{e.Index, e.Seq} }

// A Revision names a lock event: the index of the entry whose command
// made it and its place among that entry's events. Every member numbers
// the same events alike, so a watch resumes after one at any member. The
// zero Revision is before every event.
type Revision struct {
	Index uint64
	Seq   uint32
}

// Before says whether r comes before o.
func (r Revision) Before(o Revision) bool {
	return r.Index < o.Index || (r.Index == o.Index && r.Seq < o.Seq)
}

// String is "INDEX.SEQ", as the HTTP API's event ids and after= carry it.
func (r Revision) String() string { return fmt.Sprintf("%d.%d", r.Index, r.Seq) }

// ParseRevision reads "INDEX.SEQ" (or "INDEX", for the first event of
// that index's entry and after).
func ParseRevision(s string) (Revision, error) {
	is, ss, dotted := strings.Cut(s, ".")
	index, err := strconv.ParseUint(is, 10, 64)
	if err != nil {
		return Revision{}, fmt.Errorf("revision %q: want INDEX.SEQ", s)
	}
	if !dotted {
		return Revision{Index: index}, nil
	}
	seq, err := strconv.ParseUint(ss, 10, 32)
	if err != nil {
		return Revision{}, fmt.Errorf("revision %q: want INDEX.SEQ", s)
	}
	return Revision{index, uint32(seq)}, nil
}

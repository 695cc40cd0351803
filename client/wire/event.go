package wire

import "fmt"

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
}

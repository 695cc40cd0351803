package member

import (
	"strings"

	"github.com/raftlock/raftlock/fsm"
)

// EventType is what an applied command did to a lock.
type EventType uint8

// The lock events. A forced release is a Release in the log, so it is
// EventReleased too. EventSnapshot is not a change to one lock: the member
// installed a snapshot at Event.Index, so the changes before it were never
// applied here one by one and a watcher has missed them.
const (
	EventGranted  EventType = 1
	EventRenewed  EventType = 2
	EventReleased EventType = 3
	EventExpired  EventType = 4
	EventSnapshot EventType = 5
)

var eventNames = [...]string{EventGranted: "granted", EventRenewed: "renewed", EventReleased: "released",
	EventExpired: "expired", EventSnapshot: "snapshot"}

// String is the event's name as the watch APIs print it.
func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return "unknown"
}

// Event is one change to a lock, made by the command applied at Index.
// Events come only from applied entries, never from a leader's decisions,
// so every member that applies an entry produces the same events for it,
// in the same order.
type Event struct {
	Index uint64
	// Seq is the event's place among the events of its index (from 0):
	// an entry of a batch makes several, and a watch resumes after one
	// of them (Index, Seq), which every member numbers alike.
	Seq     uint32
	Type    EventType
	Key     string
	Token   uint64 // the lock's fencing token
	Owner   string // the lock's owner ("" when its Grant named none)
	LeaseMS uint64 // the lease its Grant or last Renew gave it
}

// SetWatching turns lock events on or off: while on, Ready.Events carries
// the events of the entries applied since the last Ready. A driver with
// nobody watching leaves it off, so an apply costs nothing more. Events
// pending when it is turned off are dropped.
func (c *Core) SetWatching(on bool) {
	c.watching = on
	if !on {
		c.events = nil
	}
}

// Watching says whether lock events are on.
func (c *Core) Watching() bool { return c.watching }

// beforeApply is what an event needs of the table before env applies: the
// lock a Release or Expire removes (the table no longer has it after).
func (c *Core) beforeApply(env fsm.Envelope) (fsm.Lock, bool) {
	if !c.watching || (env.Cmd.Op != fsm.OpRelease && env.Cmd.Op != fsm.OpExpire) {
		return fsm.Lock{}, false
	}
	return c.lm.machine.Get(env.Cmd.Key)
}

// noteEvent records the event of env applied at index with res, if it
// changed a lock. prev is the lock before it applied (beforeApply).
func (c *Core) noteEvent(index uint64, env fsm.Envelope, res fsm.Result, prev fsm.Lock, held bool) {
	if !c.watching {
		return
	}
	ev := Event{Index: index, Key: env.Cmd.Key, Token: res.Token}
	switch res.Status {
	case fsm.Granted:
		ev.Type, ev.Owner, ev.LeaseMS = EventGranted, env.Cmd.Owner, env.Cmd.LeaseMS
	case fsm.Renewed:
		ev.Type, ev.LeaseMS = EventRenewed, env.Cmd.LeaseMS
		if l, ok := c.lm.machine.Get(env.Cmd.Key); ok {
			ev.Owner = strings.Clone(l.Owner)
		}
	case fsm.Released, fsm.Expired:
		if !held || (res.Status == fsm.Expired && !res.Existed) {
			return
		}
		ev.Type, ev.Token, ev.Owner, ev.LeaseMS = EventReleased, prev.Token, strings.Clone(prev.Owner), prev.LeaseMS
		if res.Status == fsm.Expired {
			ev.Type = EventExpired
		}
	default:
		return
	}
	ev.Key = strings.Clone(ev.Key)
	if n := len(c.events); n > 0 && c.events[n-1].Index == index {
		ev.Seq = c.events[n-1].Seq + 1
	}
	c.events = append(c.events, ev)
}

// noteSnapshot records that a snapshot at index replaced the table.
func (c *Core) noteSnapshot(index uint64) {
	if c.watching {
		c.events = append(c.events, Event{Index: index, Type: EventSnapshot})
	}
}

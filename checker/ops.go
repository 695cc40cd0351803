package checker

import (
	"math"
	"sort"

	"github.com/raftlock/raftlock/checker/history"
)

// Op is one client operation: an invocation and its completion. An
// operation never completed counts as info (outcome unknown).
type Op struct {
	Process  history.Process
	F, Key   string
	Invoke   history.Event
	Done     *history.Event
	Type     string  // ok, fail or info
	Resolved *uint64 // info acquire found granted in the committed log: its token
}

// events are the operation's invocation and, if any, its completion.
func (o *Op) events() []history.Event {
	if o.Done == nil {
		return []history.Event{o.Invoke}
	}
	return []history.Event{o.Invoke, *o.Done}
}

// Call is the invocation time.
func (o *Op) Call() int64 { return o.Invoke.Time }

// Return is the completion time; an info operation may take effect any time
// after its call, so it returns at +inf.
func (o *Op) Return() int64 {
	if o.Type == history.Info || o.Done == nil {
		return math.MaxInt64
	}
	return o.Done.Time
}

// Token is the token an operation carries: granted (acquire ok) or given
// (release, renew, read, write).
func (o *Op) Token() uint64 {
	if o.F == "acquire" {
		switch {
		case o.Resolved != nil:
			return *o.Resolved
		case o.Type == history.OK && o.Done.Value.Token != nil:
			return *o.Done.Value.Token
		}
		return 0
	}
	if o.Invoke.Value.Token != nil {
		return *o.Invoke.Value.Token
	}
	return 0
}

// Error is the completion's error string, if any.
func (o *Op) Error() string {
	if o.Done == nil {
		return ""
	}
	return o.Done.Value.Error
}

// Window is a nemesis fault from its start to its heal.
type Window struct {
	Kind       string // kill, pause, partition, clock
	Start, End int64
	Detail     string
}

// Pair turns events into operations (in invocation order) and nemesis
// windows. Events must have passed history.Read's validation.
func Pair(events []history.Event) ([]*Op, []Window) {
	var ops []*Op
	open := map[history.Process]*Op{}
	var windows []Window
	started := map[string]int64{}
	var end int64
	for i := range events {
		e := &events[i]
		end = max(end, e.Time)
		if e.Process == history.Nemesis {
			kind, closing := nemesisKind(e)
			if kind == "" {
				continue
			}
			if !closing {
				if _, ok := started[kind]; !ok {
					started[kind] = e.Time
				}
				continue
			}
			if s, ok := started[kind]; ok {
				windows = append(windows, Window{Kind: kind, Start: s, End: e.Time})
				delete(started, kind)
			}
			continue
		}
		if e.Type == history.Invoke {
			op := &Op{Process: e.Process, F: e.F, Key: e.Key, Invoke: *e, Type: history.Info}
			ops = append(ops, op)
			open[e.Process] = op
			continue
		}
		if op, ok := open[e.Process]; ok {
			op.Done, op.Type = e, e.Type
			delete(open, e.Process)
		}
	}
	for kind, s := range started {
		windows = append(windows, Window{Kind: kind, Start: s, End: end})
	}
	sort.Slice(windows, func(i, j int) bool { return windows[i].Start < windows[j].Start })
	return ops, windows
}

// nemesisKind maps a nemesis event to the fault it opens or closes.
func nemesisKind(e *history.Event) (kind string, closing bool) {
	switch e.F {
	case "kill":
		return "kill", false
	case "start":
		return "kill", true
	case "pause":
		return "pause", false
	case "resume":
		return "pause", true
	case "partition":
		return "partition", false
	case "heal":
		return "partition", true
	case "clock":
		if e.Value.Rate != nil && *e.Value.Rate == 1 && (e.Value.OffsetMS == nil || *e.Value.OffsetMS == 0) {
			return "clock", true
		}
		return "clock", false
	}
	return "", false
}

// byKey groups operations by key, keeping invocation order.
func byKey(ops []*Op, keep func(*Op) bool) map[string][]*Op {
	m := map[string][]*Op{}
	for _, o := range ops {
		if keep(o) {
			m[o.Key] = append(m[o.Key], o)
		}
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

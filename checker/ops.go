package checker

import (
	"fmt"
	"math"
	"sort"
	"strings"

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
	Applied  bool    // info release or renew found applied in the committed log
	// SeenBy bounds a resolved acquire's return: the earliest return of an
	// operation that saw its token or a higher one on its key (0: none).
	SeenBy int64
	// FromList is the list this get is one key of (withListReads), nil
	// for an operation of the history.
	FromList *Op
}

// events are the operation's invocation and, if any, its completion.
func (o *Op) events() []history.Event {
	if o.Done == nil {
		return []history.Event{o.Invoke}
	}
	return []history.Event{o.Invoke, *o.Done}
}

// maxTime is the return of an operation that may take effect at any time.
const maxTime = math.MaxInt64

// Call is the invocation time.
func (o *Op) Call() int64 { return o.Invoke.Time }

// Return is the completion time. An info operation may take effect any time
// after its call, so it returns at +inf, unless it is a resolved grant that
// a later operation saw: it had taken effect by then (the bound etcd's
// robustness validation puts on a request whose outcome it learns later).
func (o *Op) Return() int64 {
	if o.Type == history.Info || o.Done == nil {
		if o.Resolved != nil && o.SeenBy != 0 {
			return max(o.SeenBy, o.Call())
		}
		return maxTime
	}
	return o.Done.Time
}

// Token is the token an operation carries: granted (acquire ok) or given
// (release, renew, read, write).
func (o *Op) Token() uint64 {
	if o.F == history.OpAcquire {
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
	if o.Forced() && o.Type == history.OK && o.Done.Value.Token != nil {
		return *o.Done.Value.Token // the token it released
	}
	return 0
}

// Forced says o is a forced release: an operator's, without a token,
// which frees its key whatever token holds it.
func (o *Op) Forced() bool { return o.F == history.OpRelease && o.Invoke.Value.Force }

// Error is the completion's error string, if any.
func (o *Op) Error() string {
	if o.Done == nil {
		return ""
	}
	return o.Done.Value.Error
}

// Window is a nemesis fault from its start to its heal.
type Window struct {
	Kind       string // kill, pause, partition, delay, loss, clock
	Start, End int64
	Detail     string
}

// Pair turns events into operations (in invocation order) and nemesis
// windows. Events must have passed history.Read's validation.
func Pair(events []history.Event) ([]*Op, []Window) {
	var ops []*Op
	open := map[history.Process]*Op{}
	ws := newWindowSet()
	var end int64
	for i := range events {
		e := &events[i]
		end = max(end, e.Time)
		if e.Process == history.Nemesis {
			ws.add(e)
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
	return ops, ws.close(end)
}

// windowSet follows the faults in force. Faults on members (kill, pause,
// clock) are tracked per member, so that overlapping faults of one family
// make one window that lasts until the last of them heals; network faults
// (partition, delay, loss) last until the next heal.
// windowMembership is the kind of a membership change's window, from the
// removal of a member to the promotion of the one that replaces it; the
// other windows are named after the fault events that open them.
const windowMembership = "membership"

type windowSet struct {
	members map[string]map[int]bool // kill, pause, clock: members affected
	since   map[string]int64        // family -> start of its open window
	detail  map[string][]string
	out     []Window
}

func newWindowSet() *windowSet {
	return &windowSet{members: map[string]map[int]bool{history.FaultKill: {}, history.FaultPause: {}, history.FaultClock: {}},
		since: map[string]int64{}, detail: map[string][]string{}}
}

func (s *windowSet) open(kind string, t int64, detail string) {
	if _, ok := s.since[kind]; !ok {
		s.since[kind] = t
	}
	s.detail[kind] = append(s.detail[kind], detail)
}

func (s *windowSet) shut(kind string, t int64) {
	start, ok := s.since[kind]
	if !ok {
		return
	}
	s.out = append(s.out, Window{Kind: kind, Start: start, End: t, Detail: strings.Join(s.detail[kind], "; ")})
	delete(s.since, kind)
	delete(s.detail, kind)
}

func (s *windowSet) setMembers(kind string, nodes []int, on bool, t int64, detail string) {
	m := s.members[kind]
	for _, n := range nodes {
		if on {
			m[n] = true
		} else {
			delete(m, n)
		}
	}
	switch {
	case on:
		s.open(kind, t, detail)
	case len(m) == 0:
		s.shut(kind, t)
	}
}

func (s *windowSet) add(e *history.Event) {
	v := e.Value
	switch e.F {
	case history.FaultKill:
		s.setMembers(history.FaultKill, v.Nodes, true, e.Time, fmt.Sprintf("kill %v", v.Nodes))
	case history.FaultStart:
		s.setMembers(history.FaultKill, v.Nodes, false, e.Time, "")
		// A restarted member runs a normal clock again.
		s.setMembers(history.FaultClock, v.Nodes, false, e.Time, "")
	case history.FaultPause:
		s.setMembers(history.FaultPause, v.Nodes, true, e.Time, fmt.Sprintf("pause %v", v.Nodes))
	case history.FaultResume:
		s.setMembers(history.FaultPause, v.Nodes, false, e.Time, "")
	case history.FaultPartition:
		if len(v.Links) > 0 {
			s.open(history.FaultPartition, e.Time, fmt.Sprintf("cut links %v", v.Links))
		} else {
			s.open(history.FaultPartition, e.Time, fmt.Sprintf("partition %v", v.Groups))
		}
	case history.FaultDelay:
		s.open(history.FaultDelay, e.Time, fmt.Sprintf("delay %v by %dms", v.Links, deref(v.DelayMS)))
	case history.FaultLoss:
		s.open(history.FaultLoss, e.Time, fmt.Sprintf("loss %v of %g", v.Links, deref(v.Loss)))
	case history.FaultHeal:
		for _, k := range []string{history.FaultPartition, history.FaultDelay, history.FaultLoss} {
			s.shut(k, e.Time)
		}
	case history.FaultMemberRemove:
		s.open(windowMembership, e.Time, fmt.Sprintf("replace member %v", v.Nodes))
	case history.FaultMemberPromote:
		s.shut(windowMembership, e.Time)
	case history.FaultClock:
		n := deref(v.Node)
		faulty := deref(v.Rate) != 1 || deref(v.OffsetMS) != 0
		s.setMembers(history.FaultClock, []int{n}, faulty, e.Time,
			fmt.Sprintf("node %d at %gx, %+dms", n, deref(v.Rate), deref(v.OffsetMS)))
	}
}

// close ends every window still open at end, and sorts them by start.
func (s *windowSet) close(end int64) []Window {
	for _, k := range sortedKeys(s.since) {
		s.shut(k, end)
	}
	sort.SliceStable(s.out, func(i, j int) bool { return s.out[i].Start < s.out[j].Start })
	return s.out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
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

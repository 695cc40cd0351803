package checker

import (
	"fmt"
	"sort"

	"github.com/raftlock/raftlock/checker/history"
)

// sighting is an operation that proves token held its key by time at: an ok
// acquire returning it, a get that answered it, an ok release or renewal
// with it.
type sighting struct {
	token uint64
	at    int64
	op    *Op
}

// keyEvidence is what the history shows about the holders of one key.
type keyEvidence struct {
	seen     []sighting // by token
	earliest []int      // earliest[i]: the index of the earliest sighting among seen[i:]
	free     []*Op      // gets that answered free, by call
	freeMin  []int      // freeMin[i]: the index of the earliest return among free[i:]
}

// sightingOf says which token, if any, o saw holding its key.
func sightingOf(o *Op) (uint64, bool) {
	if o.Type != history.OK {
		return 0, false
	}
	switch o.F {
	case history.OpAcquire, history.OpRelease, history.OpRenew:
		return o.Token(), o.Token() != 0
	case history.OpGet:
		if v := o.Done.Value; v.Held != nil && *v.Held && v.Token != nil {
			return *v.Token, true
		}
	}
	return 0, false
}

func isFreeGet(o *Op) bool {
	return o.F == history.OpGet && o.Type == history.OK && o.Done.Value.Held != nil && !*o.Done.Value.Held
}

// gatherEvidence indexes every key's sightings and free reads.
func gatherEvidence(ops []*Op) map[string]*keyEvidence {
	ev := map[string]*keyEvidence{}
	get := func(k string) *keyEvidence {
		e, ok := ev[k]
		if !ok {
			e = &keyEvidence{}
			ev[k] = e
		}
		return e
	}
	for _, o := range ops {
		if t, ok := sightingOf(o); ok {
			e := get(o.Key)
			e.seen = append(e.seen, sighting{token: t, at: o.Done.Time, op: o})
		}
		if isFreeGet(o) {
			e := get(o.Key)
			e.free = append(e.free, o)
		}
	}
	for _, e := range ev {
		sort.Slice(e.seen, func(i, j int) bool { return e.seen[i].token < e.seen[j].token })
		e.earliest = make([]int, len(e.seen))
		for i := len(e.seen) - 1; i >= 0; i-- {
			e.earliest[i] = i
			if i+1 < len(e.seen) && e.seen[e.earliest[i+1]].at < e.seen[i].at {
				e.earliest[i] = e.earliest[i+1]
			}
		}
		sort.Slice(e.free, func(i, j int) bool { return e.free[i].Call() < e.free[j].Call() })
		e.freeMin = make([]int, len(e.free))
		for i := len(e.free) - 1; i >= 0; i-- {
			e.freeMin[i] = i
			if i+1 < len(e.free) && e.free[e.freeMin[i+1]].Return() < e.free[i].Return() {
				e.freeMin[i] = e.freeMin[i+1]
			}
		}
	}
	return ev
}

// heldBy returns the earliest sighting of token t or a higher one on the
// key: by then the grant of t had applied, since tokens grow with every
// grant (lock rule 1, ARCHITECTURE.md) and a key passes to a higher token only after
// the lower one held it.
func (e *keyEvidence) heldBy(t uint64) (sighting, bool) {
	if e == nil {
		return sighting{}, false
	}
	i := sort.Search(len(e.seen), func(i int) bool { return e.seen[i].token >= t })
	if i == len(e.seen) {
		return sighting{}, false
	}
	return e.seen[e.earliest[i]], true
}

// readShowed says whether a read (a get, or a list's line) answered token t
// holding the key.
func (e *keyEvidence) readShowed(t uint64) bool {
	if e == nil {
		return false
	}
	i := sort.Search(len(e.seen), func(i int) bool { return e.seen[i].token >= t })
	for ; i < len(e.seen) && e.seen[i].token == t; i++ {
		if e.seen[i].op.F == history.OpGet {
			return true
		}
	}
	return false
}

// freeAfter returns the free read with the earliest return among those
// invoked at or after t.
func (e *keyEvidence) freeAfter(t int64) (*Op, bool) {
	if e == nil {
		return nil, false
	}
	i := sort.Search(len(e.free), func(i int) bool { return e.free[i].Call() >= t })
	if i == len(e.free) {
		return nil, false
	}
	return e.free[e.freeMin[i]], true
}

// boundResolved gives each resolved acquire the return its key's later
// operations prove: adding the committed log's answer must never remove a
// check, as an infinite return would from every real-time comparison.
func boundResolved(ops []*Op, ev map[string]*keyEvidence) {
	for _, o := range ops {
		if o.Resolved == nil {
			continue
		}
		if s, ok := ev[o.Key].heldBy(*o.Resolved); ok {
			o.SeenBy = s.at
		}
	}
}

// describe names an operation and its outcome for a violation message.
func describe(o *Op) string {
	res := o.Type
	switch {
	case o.Resolved != nil:
		res = fmt.Sprintf("granted %d (resolved from the log)", *o.Resolved)
	case o.Type == history.Fail:
		res = o.Error()
	case o.Type == history.OK && o.F == history.OpAcquire:
		res = fmt.Sprintf("token %d", o.Token())
	case o.Type == history.OK && o.F == history.OpGet:
		if t, ok := sightingOf(o); ok {
			res = fmt.Sprintf("held by %d", t)
		} else {
			res = "free"
		}
	}
	arg := ""
	if o.F != history.OpAcquire && o.F != history.OpGet {
		arg = fmt.Sprint(o.Token())
	}
	return fmt.Sprintf("%s(%s) on %q -> %s [%s, %s]", o.F, arg, o.Key, res, ms(o.Call()), msOrOpen(o.Return()))
}

func ms(t int64) string { return fmt.Sprintf("%.1fms", float64(t)/1e6) }

func msOrOpen(t int64) string {
	if t == maxTime {
		return "?"
	}
	return ms(t)
}

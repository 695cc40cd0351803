package checker

import (
	"slices"
	"strings"

	"github.com/raftlock/raftlock/checker/history"
)

// withListReads adds, for each ok list, one read of every key of the
// history the page covers: a key it listed was held by the token listed,
// and any other key in the page's range was free. A listed key that no
// operation of the history names (a lock held before the run, as chaos
// --held fills them) says nothing the history can be checked against. The range is the keys
// under the list's prefix after its after key, up to its last listed key
// when more follow. Each read spans the list's own call and return, so
// the linearizability, lease-timing and fencing checks judge a list page
// as they judge gets (one key at a time: a page's keys are not checked to
// be read at one instant). The reads keep the list's process and events.
func withListReads(ops []*Op) []*Op {
	var keys []string
	seen := map[string]bool{}
	hasList := false
	for _, o := range ops {
		if o.F == history.OpList {
			hasList = true
			continue
		}
		if isLockOp(o) && !seen[o.Key] {
			seen[o.Key] = true
			keys = append(keys, o.Key)
		}
	}
	if !hasList {
		return ops
	}
	slices.Sort(keys)
	out := ops
	for _, o := range ops {
		if o.F != history.OpList || o.Type != history.OK {
			continue
		}
		page := o.Done.Value
		prefix, after := o.Key, o.Invoke.Value.After
		listed := map[string]uint64{}
		last := ""
		for _, l := range page.Locks {
			listed[l.Key] = l.Token
			last = l.Key
		}
		covers := func(k string) bool {
			return strings.HasPrefix(k, prefix) && k > after && (page.More == nil || !*page.More || k <= last)
		}
		for _, k := range keys {
			if !covers(k) {
				continue
			}
			v := history.Value{Held: history.Ptr(false)}
			if t, ok := listed[k]; ok {
				v = history.Value{Held: history.Ptr(true), Token: history.Ptr(t)}
			}
			out = append(out, listedRead(o, k, v))
		}
	}
	slices.SortStableFunc(out, func(a, b *Op) int { return int(a.Invoke.Index - b.Invoke.Index) })
	return out
}

// listedRead is the get of key that list o made.
func listedRead(o *Op, key string, v history.Value) *Op {
	inv, done := o.Invoke, *o.Done
	inv.Key, inv.Value = key, history.Value{}
	done.Key, done.Value = key, v
	return &Op{Process: o.Process, F: history.OpGet, Key: key, Invoke: inv, Done: &done, Type: history.OK, FromList: o}
}

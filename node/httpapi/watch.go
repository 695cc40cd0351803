package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/server"
)

// watchPath is the API's one GET: the lock events under a prefix, as
// Server-Sent Events.
const watchPath = "/v1/watch"

// keepAlive is how often an idle event stream gets a comment line, so a
// caller that left is noticed and proxies keep the stream open.
const keepAlive = 15 * time.Second

// watch serves GET /v1/watch?prefix=P: one "data: {json}" message per
// lock event (wire.Event's JSON) with its revision as the message's id,
// from the index the member had applied when the watch began, until the
// caller hangs up. With after=INDEX.SEQ, or the Last-Event-ID header an
// EventSource sends when it reconnects, it first replays every event
// after that revision, exactly once; a revision the member no longer
// holds events after is 410 compacted. A watch the member cuts
// off (a reader too slow, the ACL no longer letting its identity read the
// prefix, the member stopping) ends with an "event: error" message
// carrying {"error","message"}, as server.WatchEnded names it. Any member
// serves it, leader or not: every member applies the same entries.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request) {
	if !allowed(w, r, http.MethodGet, "a watch is a GET") {
		return
	}
	after, err := watchAfter(r)
	if err != nil {
		h.count("watch", "invalid_argument")
		writeError(w, http.StatusBadRequest, wire.ErrorNameInvalidArgument, err.Error())
		return
	}
	prefix := r.URL.Query().Get("prefix")
	// The member first (its ACL, the identity's share of watches, its own
	// bound), then this API's slots: a caller past its identity's share
	// is refused without taking a slot others wait for.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	wt, resp := h.b.Watch(ctx, server.Identity(r.TLS), wire.FeaturePermissionDenied, prefix, after)
	if resp != nil {
		st := statusOf(resp.Op)
		if st.retry {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeError(w, st.code, st.name, ErrorMessage(resp, &wire.Request{Key: prefix}))
		return
	}
	if !h.take(w, h.watches, "watch", "watches") {
		return // cancel ends the member's watch
	}
	defer func() { <-h.watches }()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, ": watching %q from index %d\n\n", prefix, wt.From)
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		if err := rc.Flush(); err != nil {
			return // the caller left; its context ends the watch
		}
		select {
		case ev, ok := <-wt.C:
			if !ok {
				end := server.WatchEnded(wt.Err())
				writeEvent(w, "error", errorBody{Error: wire.ErrorName(end.Op), Message: end.Reason})
				rc.Flush()
				return
			}
			writeLockEvent(w, server.WireEvent(ev))
			// What is already waiting goes out in the same flush.
			for n := len(wt.C); n > 0; n-- {
				if ev, ok = <-wt.C; ok {
					writeLockEvent(w, server.WireEvent(ev))
				}
			}
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-ctx.Done():
			return
		}
	}
}

// watchAfter is the revision a watch resumes after: the after= parameter,
// else the Last-Event-ID header an EventSource sends when it reconnects;
// zero for neither (from now).
func watchAfter(r *http.Request) (wire.Revision, error) {
	if err := checkQuery(r.URL.RawQuery, []string{"prefix", "after"}); err != nil {
		return wire.Revision{}, err
	}
	s := r.URL.Query().Get("after")
	if s == "" {
		s = r.Header.Get("Last-Event-ID")
	}
	if s == "" {
		return wire.Revision{}, nil
	}
	return wire.ParseRevision(s)
}

// writeLockEvent writes one lock event, its revision as the message's id.
func writeLockEvent(w http.ResponseWriter, ev wire.Event) {
	fmt.Fprintf(w, "id: %s\n", ev.Revision())
	writeEvent(w, "", ev)
}

// writeEvent writes one Server-Sent Events message: its event name (none
// for a lock event) and v as one line of JSON.
func writeEvent(w http.ResponseWriter, name string, v any) {
	b, _ := json.Marshal(v) // plain structs: never fails
	if name != "" {
		fmt.Fprintf(w, "event: %s\n", name)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
}

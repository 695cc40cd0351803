package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/server"
)

// keepAlivePath keeps a held lock: Consul's session renew, etcd's lease
// keep-alive, for a caller that holds a lock over HTTP.
const keepAlivePath = "/v1/keepalive"

// keepAlive serves POST /v1/keepalive {"key","token","lease_ms"}: it
// renews the lock at once, then every third of its lease (server.
// KeepAlive), answering 200 with one JSON line per renewal
// ({"key","token","lease_ms"}, application/x-ndjson), until the caller
// hangs up. A keep-alive the cluster ends (the lock lost, the caller's
// rights gone) ends with one line {"error","message"}; one ended before
// its first renewal is an ordinary error answer instead.
func (h *Handler) keepAlive(w http.ResponseWriter, r *http.Request) {
	if !allowed(w, r, http.MethodPost, "a keep-alive is a POST with a JSON body") {
		return
	}
	body, err := h.readBody(w, r)
	var req *wire.Request
	if err == nil {
		req, err = parse[renewArgs](bytes.NewReader(body))
	}
	if err == nil {
		err = checkQuery(r.URL.RawQuery, nil)
	}
	if err != nil {
		h.count("keepalive", "invalid_argument")
		writeError(w, http.StatusBadRequest, wire.ErrorNameInvalidArgument, err.Error())
		return
	}
	if err := wire.ValidateLeaseMS(req.LeaseMS); err != nil {
		h.count("keepalive", "invalid_argument")
		writeError(w, http.StatusBadRequest, wire.ErrorNameInvalidArgument, err.Error())
		return
	}
	who := server.Identity(r.TLS)
	// The identity's share first, then a place among the keep-alives:
	// one identity's keep-alives cannot fill the pool, and none takes a
	// place a call waits for.
	unit, err := h.b.Admit(who, server.LimitCalls)
	if err != nil {
		h.count("keepalive", "overloaded")
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, wire.ErrorNameOverloaded, err.Error())
		return
	}
	defer unit()
	if !h.take(w, h.keepAlives, "keepalive", "keep-alives") {
		return
	}
	defer func() { <-h.keepAlives }()
	rc := http.NewResponseController(w)
	started := false
	ctx := r.Context()
	err = server.KeepAlive{
		Req: req,
		// Each renewal runs on the keep-alive's unit.
		Renew: func(rctx context.Context, req *wire.Request) *wire.Response {
			return h.b.Do(callContext(r.WithContext(server.WithCallUnit(rctx))), who, wire.FeaturePermissionDenied, req)
		},
		Renewed: func() error {
			if !started {
				w.Header().Set("Content-Type", "application/x-ndjson")
				w.Header().Set("Cache-Control", "no-cache")
				w.WriteHeader(http.StatusOK)
				started = true
			}
			b, _ := json.Marshal(leaseBody{Key: req.Key, KeyB64: wire.KeyB64(req.Key), Token: req.Token, LeaseMS: req.LeaseMS})
			if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
				return err
			}
			return rc.Flush()
		},
	}.Run(ctx)
	if ctx.Err() != nil {
		return // the caller left: the keep-alive is over
	}
	var end *server.KeepAliveEnd
	var answer *wire.Response
	switch {
	case errors.As(err, &end) && end.Lost:
		answer = &wire.Response{Op: wire.OpNotFound, Reason: fmt.Sprintf("lock %q lost (token %d): %s", req.Key, req.Token, end.Why)}
	case errors.As(err, &end):
		answer = end.Answer
	default:
		return // the connection broke under a write
	}
	if !started {
		h.answer(w, r, calls["/v1/renew"], req, answer)
		return
	}
	// Past the first line, the status is sent: the end is the last line.
	b, _ := json.Marshal(errorBody{Error: wire.ErrorName(answer.Op), Message: ErrorMessage(answer, req)})
	fmt.Fprintf(w, "%s\n", b)
	rc.Flush()
}

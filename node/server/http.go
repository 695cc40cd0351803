package server

// A member's HTTP endpoints beside the client port: metrics, status,
// health, the audit log and, with --debug, the profiles.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/raftlock/raftlock/node"
)

// AuditHandler serves GET /debug/log: the applied log as JSON, for the
// chaos harness's post-run audit ({"complete":bool,"commands":[...]}).
func AuditHandler(n *node.Node) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cmds, complete, err := n.CommittedLog(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(struct {
			Complete bool                 `json:"complete"`
			Commands []node.LoggedCommand `json:"commands"`
		}{complete, cmds})
	}
}

// healthTimeout bounds a /healthz answer.
const healthTimeout = 2 * time.Second

// HTTPHandler serves /metrics (Prometheus), /status (JSON) and /healthz;
// DebugHandlers adds the profiles.
func HTTPHandler(n *node.Node) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st, err := n.Status(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// Bounded: a member whose loop is held up (a slow sync) answers
		// unhealthy instead of leaving the probe to time out.
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		defer cancel()
		if err := n.Healthy(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

// DebugHandlers adds Go's /debug/pprof profiles to mux. A member serves
// them only with `raftlock node --debug`: a profile costs CPU and shows
// the member's internals to whoever reaches the HTTP port.
func DebugHandlers(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

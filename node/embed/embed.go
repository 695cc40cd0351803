// Package embed runs a whole raftlock member in a process, as raftlock node
// does: the node, its client port, its HTTP port, its API port (HTTP/JSON
// and gRPC), its certificates and ACL.
// It is what the CLI starts, and what a Go program that wants a member of
// its own starts (as etcd's embed package does for etcd).
package embed

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/clock"
	"github.com/raftlock/raftlock/node/console"
	"github.com/raftlock/raftlock/node/grpcapi"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/server"
)

// Config is one member's settings. Node holds the raft member's own;
// Start fills its ClientAddr, Clock, Logger, PeerTLS and AuditJournal.
type Config struct {
	Node node.Config
	// Listen is the client port's address; Advertise the one other members
	// give out in redirects (default Listen).
	Listen    string
	Advertise string
	// HTTP is the address of /metrics, /status and /healthz; "": none.
	HTTP string
	// MetricsListen is the address of a plain HTTP listener serving only
	// /metrics and /healthz, without TLS even when the member has
	// certificates (etcd's --listen-metrics-urls): probes and scrapers
	// seldom carry a client certificate, and neither page shows a key, an
	// owner or an identity. "": none.
	MetricsListen string
	// API is the address of the HTTP/JSON API (package httpapi) and the
	// gRPC API (package grpcapi), one port; "": none.
	// AdvertiseAPI is the one other members redirect its callers to
	// (default API).
	API          string
	AdvertiseAPI string
	// NoGRPCReflection leaves gRPC server reflection off the API port.
	NoGRPCReflection bool
	// TLS are the member's certificate, key and CA (none: plain TCP, which
	// only loopback addresses may use unless Insecure); ACL is the file of
	// client rights, which needs them.
	TLS      tlsconfig.Files
	ACL      string
	Insecure bool
	// FaultInjection lets the chaos harness set the member's clock over
	// HTTP and read its audit journal; never in production.
	FaultInjection bool
	// Debug serves Go's /debug/pprof on the HTTP port.
	Debug  bool
	Limits server.Limits
}

// Member is a running member: a node and its servers.
type Member struct {
	node    *node.Node
	server  *server.Server
	http    *http.Server
	metrics *http.Server // nil without Config.MetricsListen
	api     *http.Server // nil without Config.API
	grpc    *grpcapi.API // served by api
	log     *slog.Logger
	cfg     Config
	tls     *tlsconfig.Reloader // nil: plain TCP
	relay   *client.Relay       // forwards API calls to the leader
}

// Start starts a member. Everything that can be checked is checked, and
// every listener bound, before the data directory is created; a start that
// fails after that (the peer port taken) removes what it created, so a
// failed start never leaves a directory that a later start would take for
// a member's.
func Start(cfg Config, log *slog.Logger) (mb *Member, err error) {
	mb = &Member{cfg: cfg, log: log}
	acl, err := mb.loadSecurity()
	if err != nil {
		return nil, err
	}
	ln, err := mb.listen(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen for clients: %w", err)
	}
	var hln, mln, aln net.Listener
	if cfg.HTTP != "" {
		if hln, err = mb.listen(cfg.HTTP); err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen for HTTP: %w", err)
		}
	}
	closeListeners := func() {
		for _, l := range []net.Listener{ln, hln, mln, aln} {
			if l != nil {
				l.Close()
			}
		}
	}
	if cfg.MetricsListen != "" {
		// Plain on purpose, whatever the member's certificates.
		if mln, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			closeListeners()
			return nil, fmt.Errorf("listen for --metrics-listen: %w", err)
		}
	}
	if cfg.API != "" {
		if aln, err = mb.listen(cfg.API, "h2", "http/1.1"); err != nil {
			closeListeners()
			return nil, fmt.Errorf("listen for the API: %w", err)
		}
	}
	undo, err := CreateDataDir(cfg.Node.DataDir)
	if err != nil {
		closeListeners()
		return nil, err
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	n, skew, err := mb.startNode()
	if err != nil {
		closeListeners()
		return nil, err
	}
	mb.node, mb.server = n, server.New(n)
	mb.server.SetACL(acl)
	lim := cfg.Limits
	if lim.MaxWaitersPerKeyPerIdentity == 0 && cfg.Node.Limits.MaxWaitersPerKey > 0 {
		// A share of the node's queue for one key, as it is configured.
		lim.MaxWaitersPerKeyPerIdentity = max(1, cfg.Node.Limits.MaxWaitersPerKey/4)
	}
	mb.server.SetLimits(lim)
	// API calls a follower gets are relayed to the leader's client port
	// with this member's certificate (server/forward.go).
	relayOpts := client.Options{Logger: mb.log.With("component", "relay")}
	if mb.tls != nil {
		relayOpts.TLS = mb.tls.ClientConfig()
	}
	mb.relay = client.NewRelay(relayOpts)
	mb.server.SetRelay(mb.relay)
	go func() {
		// Serve retries failed accepts itself; it returns only when the
		// listener was closed under it, which leaves the port dead.
		if err := mb.server.Serve(ln); err != nil {
			mb.log.Error("the client port stopped serving", "err", err) // Serve told /healthz
		}
	}()
	if hln != nil {
		mb.serveHTTP(hln, skew)
	}
	if mln != nil {
		mb.serveMetrics(mln)
	}
	if aln != nil {
		var opts []grpcapi.Option
		if cfg.NoGRPCReflection {
			opts = append(opts, grpcapi.WithoutReflection())
		}
		mb.grpc = grpcapi.New(mb.server, n, cfg.Limits, opts...)
		h := mb.grpc.Handler(httpapi.New(mb.server, n, cfg.Limits))
		mb.api = httpapi.NewServer(h, cfg.Limits, mb.log.With("component", "api"))
		httpapi.LimitPending(mb.api, cfg.Limits, n.Metrics(), "api")
		go mb.serve(mb.api, httpapi.CountAccepts(aln, n.Metrics(), "api"), "api")
	}
	return mb, nil
}

// startNode creates and starts the node; skew is its settable clock under
// fault injection.
func (mb *Member) startNode() (n *node.Node, skew *clock.Skew, err error) {
	nc := mb.cfg.Node
	nc.Clock, nc.Logger, nc.ClientAddr = clock.NewSystem(), mb.log, mb.cfg.Advertise
	if nc.ClientAddr == "" {
		nc.ClientAddr = mb.cfg.Listen
	}
	if nc.APIAddr = mb.cfg.AdvertiseAPI; nc.APIAddr == "" {
		nc.APIAddr = mb.cfg.API
	}
	if mb.cfg.FaultInjection {
		mb.log.Warn("FAULT INJECTION ENABLED: this member's clock can be changed over HTTP; never run it in production", "member", nc.ID, "bug", nc.Bug)
		skew = clock.NewSkew()
		nc.Clock = skew
		nc.AuditJournal = filepath.Join(nc.DataDir, "audit-journal.jsonl")
	}
	if mb.tls != nil {
		nc.PeerTLS = mb.tls
	}
	if n, err = node.New(nc); err != nil {
		return nil, nil, err
	}
	if err := n.Start(); err != nil {
		n.Close()
		return nil, nil, err
	}
	return n, skew, nil
}

// serveHTTP serves the HTTP port: the web console, metrics, status and
// health, profiles with Debug, the clock and audit journal with fault
// injection, the admin endpoints only to admin identities.
func (mb *Member) serveHTTP(ln net.Listener, skew *clock.Skew) {
	mux := server.HTTPHandler(mb.node)
	mb.serveConsole(mux)
	if mb.cfg.Debug {
		server.DebugHandlers(mux)
	}
	if skew != nil {
		mux.HandleFunc("POST /debug/clock", clockHandler(skew))
		mux.HandleFunc("GET /debug/log", server.AuditHandler(mb.node))
	}
	mb.http = &http.Server{Handler: mb.server.RequireAdmin(mux), ErrorLog: slog.NewLogLogger(mb.log.With("component", "http").Handler(), slog.LevelInfo)}
	// As the API port's: a handshake or headers within the handshake
	// timeout, bounded headers, idle connections closed (a caller refused
	// 403 kept its connection open for good).
	httpapi.Timeouts(mb.http, mb.cfg.Limits)
	httpapi.LimitPending(mb.http, mb.cfg.Limits, mb.node.Metrics(), "http")
	go mb.serve(mb.http, httpapi.CountAccepts(ln, mb.node.Metrics(), "http"), "http")
}

// serveMetrics serves the plain metrics port: /metrics and /healthz as
// the HTTP port serves them, and nothing else (no status, console or
// admin endpoint: they show keys and owners, and need an identity).
func (mb *Member) serveMetrics(ln net.Listener) {
	full := server.HTTPHandler(mb.node)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", full)
	mux.Handle("GET /healthz", full)
	mb.metrics = &http.Server{Handler: mux, ErrorLog: slog.NewLogLogger(mb.log.With("component", "metrics").Handler(), slog.LevelInfo)}
	httpapi.Timeouts(mb.metrics, mb.cfg.Limits)
	httpapi.LimitPending(mb.metrics, mb.cfg.Limits, mb.node.Metrics(), "metrics")
	go mb.serve(mb.metrics, httpapi.CountAccepts(ln, mb.node.Metrics(), "metrics"), "metrics")
}

// serve serves srv on ln until it is closed. Serve retries temporary
// accept errors itself (httpapi.CountAccepts counts them); any other
// ends the port for good, which is logged, not dropped.
func (mb *Member) serve(srv *http.Server, ln net.Listener, name string) {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		mb.log.Error("stopped serving a port: it accepts no more connections", "port", name, "addr", ln.Addr().String(), "err", err)
		mb.node.ReportListener(name, err) // /healthz says so from now on
	}
}

// serveConsole adds the web console (package console) at / to the HTTP
// port; it records the member's events until the node stops.
func (mb *Member) serveConsole(mux *http.ServeMux) {
	cfg := console.Config{Node: mb.node, Server: mb.server, Logger: mb.log.With("component", "console")}
	if mb.tls != nil {
		cfg.TLS = mb.tls.ClientConfig()
	}
	c, err := console.New(cfg)
	if err != nil {
		mb.log.Error("web console not served", "err", err)
		return
	}
	c.Register(mux)
	go c.Run(context.Background())
}

// loadSecurity loads the certificates and the ACL, and refuses what would
// expose an unauthenticated member: a non-loopback address without
// certificates, unless Insecure.
func (mb *Member) loadSecurity() (*server.ACL, error) {
	cfg, id := mb.cfg, mb.cfg.Node.ID
	if err := cfg.TLS.Check(); err != nil {
		return nil, err
	}
	if !cfg.TLS.Set() {
		var exposed []string
		for _, a := range []string{cfg.Listen, cfg.Node.PeerListen, cfg.Node.Peers[id], cfg.HTTP, cfg.Advertise, cfg.API, cfg.AdvertiseAPI} {
			if a != "" && !tlsconfig.IsLoopback(a) {
				exposed = append(exposed, a)
			}
		}
		if cfg.ACL != "" {
			return nil, errors.New("--acl needs client certificates: add --cert, --key and --ca")
		}
		if len(exposed) > 0 && !cfg.Insecure {
			return nil, fmt.Errorf("member %d would serve %s without authentication or encryption: add --cert, --key and --ca (raftlock certs init makes them), or --insecure", id, strings.Join(exposed, ", "))
		}
		if len(exposed) > 0 {
			mb.log.Warn("INSECURE: serving non-loopback addresses without TLS; anyone who reaches these ports can take any lock and speak as any member", "member", id, "addresses", strings.Join(exposed, ","))
		}
		return nil, nil
	}
	r, err := tlsconfig.Load(cfg.TLS)
	if err != nil {
		return nil, err
	}
	certID, err := tlsconfig.MemberID(r.Leaf())
	if err != nil {
		return nil, fmt.Errorf("--cert %s: %w", cfg.TLS.Cert, err)
	}
	if certID != id {
		return nil, fmt.Errorf("--cert %s is member %d's certificate, not member %d's", cfg.TLS.Cert, certID, id)
	}
	mb.tls = r
	if cfg.ACL == "" {
		return nil, nil
	}
	return server.LoadACL(cfg.ACL)
}

// listen listens on addr, with TLS when the member has certificates,
// offering nextProtos in ALPN.
func (mb *Member) listen(addr string, nextProtos ...string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil || mb.tls == nil {
		return ln, err
	}
	return tls.NewListener(ln, mb.tls.ServerConfig(nextProtos...)), nil
}

// Node is the member's node.
func (mb *Member) Node() *node.Node { return mb.node }

// TLS says whether the member serves with certificates.
func (mb *Member) TLS() bool { return mb.tls != nil }

// Reload re-reads the certificates and the ACL (raftlock node does on
// SIGHUP); what fails to load is kept as it was, and logged.
func (mb *Member) Reload() {
	log := mb.log.With("member", mb.cfg.Node.ID)
	if mb.tls != nil {
		if err := mb.tls.Reload(); err != nil {
			log.Error("SIGHUP: certificates not reloaded; the previous ones stay in use", "err", err)
		} else if id, err := tlsconfig.MemberID(mb.tls.Leaf()); err != nil || id != mb.cfg.Node.ID {
			log.Error("SIGHUP: the reloaded certificate is not this member's; peers will refuse it", "cert", mb.cfg.TLS.Cert, "err", err)
		} else {
			log.Info("SIGHUP: certificates reloaded", "cert", mb.cfg.TLS.Cert, "not_after", mb.tls.Leaf().NotAfter)
		}
	}
	if mb.cfg.ACL != "" {
		acl, err := server.LoadACL(mb.cfg.ACL)
		if err != nil {
			log.Error("SIGHUP: ACL not reloaded; the previous one stays in force", "err", err)
			return
		}
		mb.server.SetACL(acl)
		log.Info("SIGHUP: ACL reloaded", "file", mb.cfg.ACL, "rules", len(acl.Rules))
	}
}

// Close stops the member at once: no handover, clients cut off.
func (mb *Member) Close() {
	for _, srv := range []*http.Server{mb.http, mb.metrics} {
		if srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			srv.Shutdown(ctx)
			cancel()
		}
	}
	if mb.api != nil {
		mb.grpc.Close()
		mb.api.Close() // ends the calls in progress: their callers are gone
	}
	mb.server.Close()
	mb.relay.Close()
	mb.node.Close()
}

// Shutdown stops the member gracefully (a leader hands over first; see
// node.Shutdown) within ctx, then closes its listeners.
func (mb *Member) Shutdown(ctx context.Context) error {
	err := mb.node.Shutdown(ctx)
	mb.stopServing(ctx)
	return err
}

// Stopped ends a member whose node stopped by itself (Node().Done() is
// closed): removed from the configuration (its job is done: nil), or a
// fatal error. Its clients get a goaway as at a shutdown, not a broken
// connection: a request in flight on a broken connection has an unknown
// outcome for its caller, while the stopped node answers it (and whatever
// else they send) ErrStopped, which they retry on another member.
func (mb *Member) Stopped(ctx context.Context) error {
	mb.stopServing(ctx)
	mb.node.Close()
	if err := mb.node.Err(); !errors.Is(err, node.ErrRemoved) {
		return fmt.Errorf("member %d stopped: %w", mb.cfg.Node.ID, err)
	}
	return nil
}

// stopServing sends every client a goaway and closes the listeners once
// the clients hung up or ctx ended. Clients move on at the goaway; the
// node answers what they still send (ErrStopped, retryable).
func (mb *Member) stopServing(ctx context.Context) {
	for _, srv := range []*http.Server{mb.http, mb.metrics} {
		if srv != nil {
			srv.Shutdown(ctx)
		}
	}
	if mb.api != nil {
		// Calls in progress are answered (a stopped node answers them
		// unavailable, which callers retry elsewhere); past ctx they end.
		// gRPC streams end now (UNAVAILABLE: go on at another member).
		mb.grpc.Stop()
		if mb.api.Shutdown(ctx) != nil {
			mb.grpc.Close()
			mb.api.Close()
		}
	}
	mb.server.Shutdown(ctx)
	mb.relay.Close()
}

// CreateDataDir creates dir if it is missing, and returns what removes
// again what the start put there: the directories it created, or the
// contents of a directory that existed empty. A directory that held
// anything is never touched.
func CreateDataDir(dir string) (undo func(), err error) {
	created := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = d
		if filepath.Dir(d) == d {
			break
		}
	}
	wasEmpty := false
	if created == "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}
		wasEmpty = len(entries) == 0
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	return func() {
		switch {
		case created != "":
			os.RemoveAll(created)
		case wasEmpty:
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}, nil
}

// clockHandler sets the member's clock rate and offset:
// POST /debug/clock {"rate":2.0,"offset_ms":0}.
func clockHandler(c *clock.Skew) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Rate     float64 `json:"rate"`
			OffsetMS int64   `json:"offset_ms"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil || req.Rate <= 0 {
			http.Error(w, "want {\"rate\":R>0,\"offset_ms\":N}", http.StatusBadRequest)
			return
		}
		c.Set(req.Rate, time.Duration(req.OffsetMS)*time.Millisecond)
		fmt.Fprintf(w, "{\"rate\":%g}\n", c.Rate())
	}
}

// Package console is a member's live web console, served at / on its HTTP
// port: the members with the leader marked, the configuration, the held
// locks (paged and searched by prefix, with their waiters and a lease
// countdown), recent events, and small charts of throughput and latency
// from the member's own metrics.
//
// The page (static/: HTML, CSS and JS embedded in the binary, loading
// nothing from outside, so it works offline) polls read-only JSON under
// /console/api/ about once a second. It never asks for the whole lock
// table: a page of at most 200 locks at a time, as the member's list
// pages it. What it shows of the locks obeys the ACL: a caller sees only
// the keys its identity may read, as /v1/list would show them.
package console

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/server"
)

//go:embed static
var static embed.FS

// Page sizes of the locks endpoint.
const (
	DefaultPage = 50
	MaxPage     = 200
)

// apiTimeout bounds the member work behind one API answer.
const apiTimeout = 3 * time.Second

// Config is what a console shows and how it reaches the other members.
type Config struct {
	Node   *node.Node
	Server *server.Server // the ACL and the identities of callers
	// TLS is the client configuration the console asks the other
	// members for their status with (the member's own certificate); nil
	// over plain TCP.
	TLS    *tls.Config
	Logger *slog.Logger
}

// Console serves one member's console. Run records its events and
// metrics; Register adds its pages to a mux.
type Console struct {
	node    *node.Node
	server  *server.Server
	log     *slog.Logger
	rec     *recorder
	members *members
}

// New returns a member's console.
func New(cfg Config) (*Console, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The client only asks members by address (Status); New wants an
	// endpoint all the same.
	self := cfg.Node.PeerClientAddr(cfg.Node.ID())
	if self == "" {
		self = "127.0.0.1:0"
	}
	peers, err := client.New([]string{self}, client.Options{TLS: cfg.TLS, DialTimeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return &Console{
		node: cfg.Node, server: cfg.Server, log: log,
		rec:     newRecorder(cfg.Node),
		members: &members{node: cfg.Node, peers: peers},
	}, nil
}

// Run records the member's events and metrics once a second until ctx
// ends or the member stops, then lets go of its connections to the other
// members.
func (c *Console) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.node.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	c.rec.run(ctx)
	c.members.peers.Close()
}

// Register serves the page at / and its JSON under /console/api/.
func (c *Console) Register(mux *http.ServeMux) {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.Handle("GET /console/", http.StripPrefix("/console/", http.FileServerFS(files)))
	mux.HandleFunc("GET /console/api/cluster", c.serveCluster)
	mux.HandleFunc("GET /console/api/locks", c.serveLocks)
}

// Cluster is the answer of /console/api/cluster.
type Cluster struct {
	Cluster string `json:"cluster"` // the cluster id, hex ("" unknown)
	Self    uint64 `json:"self"`
	Leader  uint64 `json:"leader"`
	Term    uint64 `json:"term"`
	// Identity is the caller's client identity; ReadPrefixes the key
	// prefixes it may read, null when no ACL is in force (every key).
	Identity     string   `json:"identity"`
	ReadPrefixes []string `json:"read_prefixes"`
	Locks        uint64   `json:"locks"`   // held in this member's table
	Waiters      int64    `json:"waiters"` // queued here (only a leader queues)
	Members      []Member `json:"members"`
	Voters       []uint64 `json:"voters"`
	Learners     []uint64 `json:"learners"`
	Events       []Event  `json:"events"`   // newest first
	Expiries     []Expiry `json:"expiries"` // newest first, of keys the caller may read
	Series       []Point  `json:"series"`   // oldest first, one a second
}

func (c *Console) serveCluster(w http.ResponseWriter, r *http.Request) {
	c.rec.viewed()
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	st, err := c.node.Status(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("status: %w", err), nil)
		return
	}
	who := server.Identity(r.TLS)
	out := Cluster{
		Self: st.ID, Leader: st.Leader, Term: st.Term, Locks: st.Locks,
		Identity: who, ReadPrefixes: c.server.ReadPrefixes(who),
		Voters: nonNil(st.Voters), Learners: nonNil(st.Learners),
		Members: c.members.get(ctx, st),
	}
	if id := c.node.ClusterID(); id != 0 {
		out.Cluster = fmt.Sprintf("%016x", id)
	}
	out.Events, out.Expiries, out.Series, out.Waiters = c.rec.view(func(key string) bool { return c.server.MayRead(who, key) })
	writeJSON(w, http.StatusOK, out)
}

// Lock is one held lock of a page.
type Lock struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	RemainingMS int64  `json:"remaining_ms"`
	LeaseMS     uint64 `json:"lease_ms"`
	Waiters     int    `json:"waiters"`
}

// Locks is the answer of /console/api/locks: a page of the held locks
// under Prefix after After, in key order, as this member applied them.
// WaitersKnown is false on a follower: only the leader queues acquires.
type Locks struct {
	Prefix       string `json:"prefix"`
	After        string `json:"after"`
	Locks        []Lock `json:"locks"`
	More         bool   `json:"more"`
	WaitersKnown bool   `json:"waiters_known"`
}

func (c *Console) serveLocks(w http.ResponseWriter, r *http.Request) {
	c.rec.viewed()
	q := r.URL.Query()
	prefix, after := q.Get("prefix"), q.Get("after")
	limit := DefaultPage
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("limit %q: want a positive number", s), nil)
			return
		}
		limit = min(n, MaxPage)
	}
	who := server.Identity(r.TLS)
	if !c.server.MayRead(who, prefix) {
		err := fmt.Errorf("identity %q may not list %q", who, prefix)
		writeError(w, http.StatusForbidden, err, c.server.ReadPrefixes(who))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	// A stale read: this member's applied table, so every member's console
	// answers without asking the leader, and the console's polls never
	// count as client requests in the charts.
	page, err := c.node.List(ctx, prefix, after, limit, true)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("list: %w", err), nil)
		return
	}
	keys := make([]string, len(page.Locks))
	for i, l := range page.Locks {
		keys[i] = l.Key
	}
	waiters, leader, err := c.node.Waiters(ctx, keys)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("waiters: %w", err), nil)
		return
	}
	out := Locks{Prefix: prefix, After: after, Locks: make([]Lock, len(page.Locks)), More: page.More, WaitersKnown: leader}
	for i, l := range page.Locks {
		out.Locks[i] = Lock{Key: l.Key, Owner: l.Owner, Token: l.Token, RemainingMS: l.RemainingMS, LeaseMS: l.LeaseMS, Waiters: waiters[i]}
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// writeError answers err; readable, when not nil, names the prefixes the
// caller may read instead.
func writeError(w http.ResponseWriter, code int, err error, readable []string) {
	writeJSON(w, code, struct {
		Error        string   `json:"error"`
		ReadPrefixes []string `json:"read_prefixes,omitempty"`
	}{err.Error(), readable})
}

func nonNil(ids []uint64) []uint64 {
	if ids == nil {
		return []uint64{}
	}
	return ids
}

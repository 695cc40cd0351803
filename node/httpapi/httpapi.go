// Package httpapi is a member's HTTP/JSON API (raftlock node --api): every
// call is a POST of a JSON body to a path of /v1/ (acquire, release, renew,
// get, list, status), answered in JSON; GET /v1/watch streams lock events
// as Server-Sent Events. It only translates: each call
// becomes the client protocol's request (package wire) and runs through
// the client port's own dispatch, server.Server.Do, with the same ACL and
// the identity of the same client certificate, so the two protocols cannot
// disagree on a lock. A follower relays a call to the leader
// (server.Forwarding); to a caller that sent raftlock-redirect: follow it
// answers 307 to the leader's advertised API address instead, which
// members announce to each other on their peer streams
// (peer.TCP.PeerAPIAddr). Failures are {"error","message"} with the CLI's
// error names (wire.ErrorName). The server (NewServer) speaks HTTP/1.1 and
// HTTP/2, over TLS by ALPN and without TLS by prior knowledge, so gRPC can
// later share the port. docs/http-api.md is the user's description.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/server"
)

// MaxBody bounds a request's body: a key, an owner and a few numbers fit
// in a few hundred bytes.
const MaxBody = 16 << 10

// retryAfter is the Retry-After of a 503: a second, about an election.
const retryAfter = "1"

// Backend is what the API runs its calls on: a member's client dispatch
// and its view of the other members' API addresses.
type Backend interface {
	// Do runs one client request for the identity who
	// (server.Server.Do).
	Do(ctx context.Context, who string, features uint64, req *wire.Request) *wire.Response
	// PeerAPIAddr is the API address of member id, "" when unknown
	// (node.Node.PeerAPIAddr).
	PeerAPIAddr(id uint64) string
	// Watch starts a watch of the locks under prefix for the identity
	// who, or answers why not (server.Server.Watch).
	Watch(ctx context.Context, who string, features uint64, prefix string, after wire.Revision) (*node.Watch, *wire.Response)
	// Admit takes one unit of k for the identity who, or refuses it
	// with an error wrapping node.ErrOverloaded (server.Server.Admit).
	Admit(who string, k server.Limit) (release func(), err error)
}

// memberBackend is the Backend of a running member: its server and its node.
type memberBackend struct {
	*server.Server
	n *node.Node
}

func (m memberBackend) PeerAPIAddr(id uint64) string { return m.n.PeerAPIAddr(id) }

// MemberBackend is the Backend of the member whose client server is s and
// node n (the gRPC API's too).
func MemberBackend(s *server.Server, n *node.Node) Backend { return memberBackend{s, n} }

// Handler serves the API's paths.
type Handler struct {
	b       Backend
	metrics *node.Metrics // nil: the refusals made here are not counted
	slots   chan struct{} // one per call in progress (Limits.MaxConns)
	watches chan struct{} // one per watch in progress (as many)
	// keepAlives has one per keep-alive in progress (as many).
	keepAlives chan struct{}
	// bodyTimeout bounds the reading of a call's body
	// (Limits.HandshakeTimeout): a caller that declares a body and sends
	// it slowly, or never, holds its connection that long at most.
	bodyTimeout time.Duration
}

// New returns the API of the member whose client server is s and node n,
// within lim (the client port's limits; zero fields take their
// defaults). At most lim.MaxConns calls run at once (waiting acquires
// included), and as many watches beside them; one more is answered 503
// overloaded. A call takes its place only once its body is read, within
// lim.HandshakeTimeout: a caller sending its body slowly holds no place
// others wait for.
func New(s *server.Server, n *node.Node, lim server.Limits) *Handler {
	h := NewWithBackend(memberBackend{s, n}, lim)
	h.metrics = n.Metrics()
	return h
}

// NewWithBackend is New on any Backend (tests).
func NewWithBackend(b Backend, lim server.Limits) *Handler {
	lim = lim.WithDefaults()
	return &Handler{b: b, slots: make(chan struct{}, lim.MaxConns), watches: make(chan struct{}, lim.MaxConns), keepAlives: make(chan struct{}, lim.MaxConns), bodyTimeout: lim.HandshakeTimeout}
}

// MaxHeaderBytes bounds a request's headers on the member's HTTP ports: a
// call needs a few hundred bytes.
const MaxHeaderBytes = 64 << 10

// NewServer is the http.Server of the API port: HTTP/1.1 and HTTP/2
// (over TLS when the listener it serves is a TLS one offering "h2" in
// ALPN; without TLS by prior knowledge, h2c, as gRPC clients speak it),
// with the timeouts of Timeouts. log receives the server's own errors (a
// failed TLS handshake, say).
func NewServer(h http.Handler, lim server.Limits, log *slog.Logger) *http.Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:   h,
		Protocols: &protos,
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelInfo),
	}
	Timeouts(srv, lim)
	return srv
}

// Timeouts bounds what a connection to srv, one of the member's HTTP
// ports, may hold without progress, after lim (zero fields: the
// defaults): its TLS handshake and each request's headers take at most
// lim.HandshakeTimeout (net/http cuts the handshake at the least of its
// read timeouts), its headers MaxHeaderBytes, and it stays open at most
// lim.IdleTimeout without a request (HTTP/2 alike). There is no
// ReadTimeout or WriteTimeout: a WriteTimeout would cut watches, and a
// ReadTimeout gRPC streams (HTTP/2 applies it to each stream's reads),
// which last as long as their callers want; a call's body has its own
// deadline (Handler).
func Timeouts(srv *http.Server, lim server.Limits) {
	lim = lim.WithDefaults()
	srv.ReadHeaderTimeout = lim.HandshakeTimeout
	srv.IdleTimeout = lim.IdleTimeout
	srv.MaxHeaderBytes = MaxHeaderBytes
}

// ServeHTTP runs one call.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == watchPath {
		h.watch(w, r)
		return
	}
	if r.URL.Path == keepAlivePath {
		h.keepAlive(w, r)
		return
	}
	if r.URL.Path == locksPath || strings.HasPrefix(r.URL.Path, locksPath+"/") {
		h.read(w, r)
		return
	}
	c, ok := calls[r.URL.Path]
	if !ok {
		writeError(w, http.StatusNotFound, wire.ErrorNameInvalidArgument, fmt.Sprintf("no call %s: the calls are POST /v1/acquire, /v1/release, /v1/renew, /v1/keepalive, /v1/get, /v1/list and /v1/status, GET /v1/locks/KEY and /v1/locks?prefix=P, and GET /v1/watch", r.URL.Path))
		return
	}
	if !allowed(w, r, http.MethodPost, "every call is a POST with a JSON body") {
		return
	}
	// The body is read before the call takes a place: a caller that
	// sends it slowly holds its own connection, not a place of others.
	body, err := h.readBody(w, r)
	if errors.Is(err, errSlowBody) {
		h.count(c.op, "invalid_argument")
		if r.ProtoMajor == 1 {
			// The connection is in the middle of a request: it cannot
			// carry another. (HTTP/2 ends the stream alone.)
			w.Header().Set("Connection", "close")
		}
		writeError(w, http.StatusRequestTimeout, wire.ErrorNameInvalidArgument, err.Error())
		return
	}
	var req *wire.Request
	if err == nil {
		req, err = c.parse(bytes.NewReader(body))
	}
	if err == nil {
		err = checkQuery(r.URL.RawQuery, nil)
	}
	if err != nil {
		h.count(c.op, "invalid_argument")
		writeError(w, http.StatusBadRequest, wire.ErrorNameInvalidArgument, err.Error())
		return
	}
	h.run(w, r, c, req)
}

// run runs req, the request of call c, in one of the call slots, and
// writes its answer.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, c call, req *wire.Request) {
	if !h.take(w, h.slots, c.op, "API calls in progress") {
		return
	}
	defer func() { <-h.slots }()
	// r.Context() ends when the caller hangs up: a waiting acquire then
	// leaves the queue, and a grant that applies after is released (rule 7).
	resp := h.b.Do(callContext(r), server.Identity(r.TLS), wire.FeaturePermissionDenied, req)
	if resp == nil {
		return // the caller left; nobody reads an answer
	}
	h.answer(w, r, c, req, resp)
}

// callContext is r's context, marked for a follower to relay the call to
// the leader unless the caller said it follows redirects itself
// (wire.RedirectHeader; server.Forwarding).
func callContext(r *http.Request) context.Context {
	if strings.EqualFold(r.Header.Get(wire.RedirectHeader), wire.RedirectFollow) {
		return r.Context()
	}
	return server.Forwarding(r.Context())
}

// locksPath is the reads' resource: GET /v1/locks/KEY is a get, GET
// /v1/locks?prefix=P&limit=N&after=A a list, answered as POST /v1/get and
// /v1/list answer, so that a read is a plain, cacheable, curl-able GET.
const locksPath = "/v1/locks"

// read runs a GET of locksPath.
func (h *Handler) read(w http.ResponseWriter, r *http.Request) {
	if !allowed(w, r, http.MethodGet, "reads are GETs (POST /v1/get and /v1/list take a JSON body)") {
		return
	}
	path, c := locksPath, calls["/v1/list"]
	var req *wire.Request
	var err error
	if key, ok := strings.CutPrefix(r.URL.Path, locksPath+"/"); ok {
		path, c = locksPath+"/KEY", calls["/v1/get"]
		if r.URL.RawQuery != "" {
			err = errors.New("takes no query parameters: the key is the rest of the path")
		} else {
			req, err = (&keyArgs{Key: key}).request()
		}
	} else if err = checkQuery(r.URL.RawQuery, []string{"prefix", "limit", "after", "after_b64"}); err == nil {
		q := r.URL.Query()
		a := listArgs{Prefix: q.Get("prefix"), After: q.Get("after"), AfterB64: q.Get("after_b64")}
		if l := q.Get("limit"); l != "" {
			var n uint64
			if n, err = strconv.ParseUint(l, 10, 64); err != nil {
				err = fmt.Errorf("limit %q: want a count", l)
			}
			a.Limit = number(n)
		}
		if err == nil {
			req, err = a.request()
		}
	}
	if err != nil {
		h.count(c.op, "invalid_argument")
		writeError(w, http.StatusBadRequest, wire.ErrorNameInvalidArgument, fmt.Sprintf("GET %s: %v", path, err))
		return
	}
	h.run(w, r, c, req)
}

// errSlowBody is a call's body not received within the API's deadline.
var errSlowBody = errors.New("request body not received in time")

// readBody reads a call's body, at most MaxBody bytes, within
// h.bodyTimeout: past it the error wraps errSlowBody.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	// A ResponseWriter that cannot set deadlines is a test's recorder,
	// or a wrapper's that hides them: its body is read without one.
	limited := rc.SetReadDeadline(time.Now().Add(h.bodyTimeout)) == nil
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if limited && err == nil {
		// The call may wait far longer (an acquire in a queue). HTTP/1
		// clears the deadline itself as it starts watching for a
		// hang-up; an HTTP/2 stream's timer is stopped here.
		rc.SetReadDeadline(time.Time{})
	}
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil:
		return b, nil
	case errors.As(err, &tooBig):
		return nil, fmt.Errorf("request body exceeds %d bytes", tooBig.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return nil, fmt.Errorf("%w: the whole body must arrive within %v of its headers (--handshake-timeout)", errSlowBody, h.bodyTimeout)
	}
	return nil, fmt.Errorf("bad request body: %v", err)
}

// answer writes resp, the answer to req.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, c call, req *wire.Request, resp *wire.Response) {
	if resp.Op == c.ok {
		writeJSON(w, http.StatusOK, c.body(req, resp))
		return
	}
	if resp.Op == wire.OpRedirect {
		h.redirect(w, r, resp)
		return
	}
	st := statusOf(resp.Op)
	if st.retry {
		w.Header().Set("Retry-After", retryAfter)
	}
	writeError(w, st.code, st.name, ErrorMessage(resp, req))
}

// redirect sends the caller to the leader's API, or answers unavailable
// when its address is not known here (a leader from before the API, one
// serving none, or one this member has no stream with yet).
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, resp *wire.Response) {
	addr := h.b.PeerAPIAddr(resp.LeaderID)
	if addr == "" {
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, wire.ErrorNameUnavailable, LeaderUnknown(resp.LeaderID))
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	loc := scheme + "://" + addr + r.URL.RequestURI()
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusTemporaryRedirect, redirectBody{LeaderID: resp.LeaderID, Location: loc})
}

// allowed says whether r uses method, the one its path takes, or answers
// 405 naming it (rule says so in words) and returns false.
func allowed(w http.ResponseWriter, r *http.Request, method, rule string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, http.StatusMethodNotAllowed, wire.ErrorNameInvalidArgument, fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, rule))
	return false
}

// take takes one of slots for a request of op (a call, a watch), or
// answers 503 overloaded when every slot is taken (what names what the
// slots count) and returns false. The caller frees its slot with <-slots
// once answered.
func (h *Handler) take(w http.ResponseWriter, slots chan struct{}, op, what string) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
		h.count(op, "overloaded")
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, wire.ErrorNameOverloaded, fmt.Sprintf("%d %s on this member (limit %d)", cap(slots), what, cap(slots)))
		return false
	}
}

// count records a call refused here, before it reached the member
// (Server.Handle counts the rest), as the client port counts its own.
func (h *Handler) count(op, result string) {
	if h.metrics != nil {
		h.metrics.ClientRequests.WithLabelValues(op, result).Inc()
	}
}

// status is how an error answer goes out over HTTP.
type status struct {
	code  int
	name  string // wire.ErrorName
	retry bool   // nothing was proposed: Retry-After
}

// statusOf maps an error answer to its HTTP status, as the table
// (docs/http-api.md) has it. The client port's error answers come from
// the member's errors in one place (server's errorResponse); this maps
// those answers.
func statusOf(op wire.Op) status {
	name := wire.ErrorName(op)
	switch op {
	case wire.OpHeld:
		return status{http.StatusConflict, name, false}
	case wire.OpNotFound:
		return status{http.StatusNotFound, name, false}
	case wire.OpInvalidArgument:
		return status{http.StatusBadRequest, name, false}
	case wire.OpPermissionDenied:
		return status{http.StatusForbidden, name, false}
	case wire.OpUnavailable, wire.OpOverloaded:
		return status{http.StatusServiceUnavailable, name, true}
	case wire.OpOutcomeUnknown:
		return status{http.StatusInternalServerError, name, false}
	case wire.OpCompacted:
		return status{http.StatusGone, name, false}
	}
	return status{http.StatusInternalServerError, wire.ErrorNameError, false}
}

// LeaderUnknown is a follower's answer when it has no API address for
// member id, the leader as its raft knows it: the peer stream that
// announced the address is down, which it is for the fraction of a second
// between a leader's death and the next election (and for good when the
// leader serves no API, or runs a version from before the API). Either
// way nobody can be sent there, so the caller hears that the leader is
// not known, not the name of a member that may be dead.
func LeaderUnknown(id uint64) string {
	return fmt.Sprintf("not the leader, and the leader is unknown here: member %d led last, but this member is not in touch with its API (it may have just failed); retry in a moment", id)
}

// checkQuery refuses a query string with any parameter but those of
// known, each given at most once: a misspelt parameter (?prefx=a) must
// not be taken for its absence, as an unknown body field is not.
func checkQuery(raw string, known []string) error {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return fmt.Errorf("bad query string: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(known, name) && len(known) == 0:
			return fmt.Errorf("unknown query parameter %q: the call's arguments are its JSON body", name)
		case !slices.Contains(known, name):
			return fmt.Errorf("unknown query parameter %q: the parameters are %s", name, strings.Join(known, ", "))
		case len(q[name]) > 1:
			return fmt.Errorf("query parameter %q given %d times", name, len(q[name]))
		}
	}
	return nil
}

// ErrorMessage is the one-line message of an error answer to req: the
// member's reason, or what the answer means when it gives none (the gRPC
// API's messages too).
func ErrorMessage(resp *wire.Response, req *wire.Request) string {
	if resp.Reason != "" {
		return resp.Reason
	}
	switch resp.Op {
	case wire.OpHeld:
		return fmt.Sprintf("lock %q is held", req.Key)
	case wire.OpNotFound:
		if req.Force {
			return fmt.Sprintf("lock %q is not held", req.Key) // a forced release names no token
		}
		return fmt.Sprintf("not the holder: lock %q is not held with token %d", req.Key, req.Token)
	}
	return "answer " + strconv.Itoa(int(resp.Op)) + " of the member"
}

// errorBody is every failure's answer.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// redirectBody is a 307's answer, beside its Location.
type redirectBody struct {
	LeaderID uint64 `json:"leader_id"`
	Location string `json:"location"`
}

func writeError(w http.ResponseWriter, code int, name, msg string) {
	writeJSON(w, code, errorBody{Error: name, Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// decodeBody reads a call's JSON body into v: one object (an empty body
// is {}), no field v lacks, each of its type, its strings UTF-8 text
// (checkText). Its error is the one line a 400 carries.
func decodeBody(body io.Reader, v any) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("bad request body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return nil // no body: every field is zero
	}
	if err == nil {
		if dec.Decode(&struct{}{}) != io.EOF {
			return errors.New("bad request body: want one JSON object")
		}
		return checkText(b)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		if typ.Field == "" {
			return fmt.Errorf("bad request body: want a JSON object, got %s", typ.Value)
		}
		return fmt.Errorf("bad request body: %q must be %s, got %s", typ.Field, kindName(typ.Type.Kind()), typ.Value)
	}
	return fmt.Errorf("bad request body: %v", strings.TrimPrefix(err.Error(), "json: "))
}

// checkText refuses a body whose string fields are not all UTF-8 text.
// encoding/json reads each byte that is not UTF-8, and each lone
// surrogate escape (\udcff, what Python writes for a byte it could not
// decode), as U+FFFD: a key would silently name another lock. A key so
// refused gets the key rule's message (wire.ErrKeyNotText); the calls
// that may name a key stored before the rule take it in key_b64.
func checkText(body []byte) error {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return nil // decoded already: nothing but an object gets here
	}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[name]
		if len(raw) == 0 || raw[0] != '"' || isText(raw) {
			continue
		}
		if name == "key" {
			return wire.ErrKeyNotText
		}
		return fmt.Errorf("bad request body: %q must be valid UTF-8", name)
	}
	return nil
}

// isText says whether raw, a JSON string, is UTF-8 that decodes to what it
// says: every U+FFFD it decodes to written as one, none standing for a
// byte or escape that is not text.
func isText(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	written := bytes.Count(raw, []byte(string(utf8.RuneError)))
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] == 'u' && i+6 <= len(raw) && strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
			written++
		}
		i++ // past the escaped character: \\ufffd is a backslash, then "ufffd"
	}
	return strings.Count(s, string(utf8.RuneError)) == written
}

// kindName says what a field of kind k takes, in a caller's words.
func kindName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Uint64:
		return "a whole number, 0 or more"
	}
	return "a " + k.String()
}

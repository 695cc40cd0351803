package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/server"
)

// fakeBackend answers every request with resp; leaders maps member ids to
// API addresses.
type fakeBackend struct {
	resp    wire.Response
	leaders map[uint64]string
	got     *wire.Request
	who     string
}

func (f *fakeBackend) Do(_ context.Context, who string, _ uint64, req *wire.Request) *wire.Response {
	f.got, f.who = req, who
	r := f.resp
	return &r
}

func (f *fakeBackend) PeerAPIAddr(id uint64) string { return f.leaders[id] }

// Each error answer of the member has its status and name, as the issue's
// table (docs/http-api.md) has them; only what is safe to retry carries
// Retry-After.
func TestErrorAnswersMapToTheirStatus(t *testing.T) {
	for _, tc := range []struct {
		op    wire.Op
		code  int
		name  string
		retry bool
	}{
		{wire.OpHeld, 409, "held", false},
		{wire.OpNotFound, 404, "not-found", false},
		{wire.OpInvalidArgument, 400, "invalid-argument", false},
		{wire.OpPermissionDenied, 403, "permission-denied", false},
		{wire.OpUnavailable, 503, "unavailable", true},
		{wire.OpOverloaded, 503, "overloaded", true},
		{wire.OpOutcomeUnknown, 500, "outcome-unknown", false},
		{wire.OpError, 500, "error", false},
	} {
		b := &fakeBackend{resp: wire.Response{Op: tc.op, Reason: "because"}}
		rec := serve(t, NewWithBackend(b, server.Limits{}), "/v1/acquire", `{"key":"k","lease_ms":1000}`)
		var body errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != tc.code || body.Error != tc.name || body.Message == "" {
			t.Errorf("answer %#x: %d %+v, want %d %s", tc.op, rec.Code, body, tc.code, tc.name)
		}
		if got := rec.Header().Get("Retry-After") != ""; got != tc.retry {
			t.Errorf("answer %#x: Retry-After %q", tc.op, rec.Header().Get("Retry-After"))
		}
	}
}

// A follower whose leader's API address it does not know (the leader just
// died and its stream with it, or it serves no API, or runs a version from
// before it) answers 503 unavailable, which the caller retries, saying the
// leader is unknown rather than naming a member nobody can be sent to;
// one that knows it redirects there.
func TestRedirectNeedsTheLeadersAPIAddress(t *testing.T) {
	b := &fakeBackend{resp: wire.Response{Op: wire.OpRedirect, LeaderID: 2, Leader: "127.0.0.1:8002"}}
	rec := serve(t, NewWithBackend(b, server.Limits{}), "/v1/release", `{"key":"k","token":3}`)
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"unavailable"`) {
		t.Errorf("leader's API address unknown: %d %q", rec.Code, rec.Body.String())
	}
	if msg := answerOf(t, rec).Message; !strings.HasPrefix(msg, "not the leader, and the leader is unknown here") || strings.Contains(msg, "no API address known") {
		t.Errorf("leader's API address unknown: message %q", msg)
	}
	b.leaders = map[uint64]string{2: "10.0.0.2:10002"}
	rec = serve(t, NewWithBackend(b, server.Limits{}), "/v1/release", `{"key":"k","token":3}`)
	if loc := rec.Header().Get("Location"); rec.Code != 307 || loc != "http://10.0.0.2:10002/v1/release" {
		t.Errorf("leader's API address known: %d to %q", rec.Code, loc)
	}
	if b.got.Op != wire.OpRelease || b.got.Key != "k" || b.got.Token != 3 || b.who != "" {
		t.Errorf("the member was asked %+v by %q", b.got, b.who)
	}
}

// Past the calls in progress the API allows, one more is answered 503
// overloaded at once.
func TestInflightBound(t *testing.T) {
	h := NewWithBackend(&fakeBackend{resp: wire.Response{Op: wire.OpValue}}, server.Limits{MaxConns: 1})
	h.slots <- struct{}{} // one call in progress
	rec := serve(t, h, "/v1/get", `{"key":"k"}`)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"overloaded"`) || rec.Header().Get("Retry-After") == "" {
		t.Errorf("past the bound: %d %q", rec.Code, rec.Body.String())
	}
}

func serve(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec
}

// Whatever a client sends as a call's body, the member answers a request
// or a one-line 400, never a panic, and a request it makes carries a key
// no lock refuses: a new key (an acquire's) keeps the key rule, any other
// is of a length a stored key may have.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"key":"a","lease_ms":10000,"wait_ms":5,"owner":"o"}`, `{"key":"a","token":18446744073709551615}`,
		`{"prefix":"p","limit":3,"after":"x"}`, `{"key":"a"}{}`, `[1]`, `{"key":1e999}`, `{"key":"\ud800"}`, `null`,
		`{"key_b64":"dTgv//4=","token":3}`, `{"after_b64":"/w==","limit":1}`, "{\"key\":\"u8/\xff\xfe\",\"lease_ms\":1000}",
		`{"key":"a\u0000","lease_ms":1000}`, `{"key":"a","token":"18446744073709551615"}`, `{"key":"a","token":"1e3"}`,
		`{"key":"a","lease_ms":{"x":1}}`, `{"key":"a","token":null}`, `{"key":"\\ufffd\ufffd","lease_ms":1000}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for path, c := range calls {
			req, err := c.parse(strings.NewReader(body))
			if err != nil {
				if msg := err.Error(); msg == "" || strings.Contains(msg, "\n") {
					t.Fatalf("%s: message %q is not one line", path, msg)
				}
				continue
			}
			check := wire.ValidateStoredKey
			if req.Op == wire.OpAcquire {
				check = wire.ValidateKey
			}
			if req.Op == wire.OpAcquire || req.Op == wire.OpRelease || req.Op == wire.OpRenew || req.Op == wire.OpGet {
				if err := check(req.Key); err != nil {
					t.Fatalf("%s: request with key %q: %v", path, req.Key, err)
				}
			}
		}
	})
}

func (f *fakeBackend) Watch(_ context.Context, who string, _ uint64, prefix string, _ wire.Revision) (*node.Watch, *wire.Response) {
	f.got, f.who = &wire.Request{Prefix: prefix}, who
	r := f.resp
	return nil, &r
}

// A forced release of a free key says the key is not held; it names no
// token, since the caller sent none.
func TestForcedReleaseOfAFreeKeySaysNotHeld(t *testing.T) {
	b := &fakeBackend{resp: wire.Response{Op: wire.OpNotFound}}
	rec := serve(t, NewWithBackend(b, server.Limits{}), "/v1/release", `{"key":"k","force":true}`)
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 404 || body.Error != "not-found" || body.Message != `lock "k" is not held` {
		t.Errorf("forced release of a free key: %d %+v", rec.Code, body)
	}
}

func (f *fakeBackend) Admit(string, server.Limit) (func(), error) { return func() {}, nil }

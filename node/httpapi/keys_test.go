package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/server"
)

// answerOf is rec's error answer.
func answerOf(t *testing.T, rec *httptest.ResponseRecorder) errorBody {
	t.Helper()
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("answer %q: %v", rec.Body.String(), err)
	}
	return body
}

// A key breaking the key rule is refused with the rule's message before
// it reaches the member, however the body spells it: bytes that are not
// UTF-8 (which encoding/json would silently read as U+FFFD, naming
// another lock), a lone surrogate escape (what Python writes for such a
// byte), a NUL. A call naming a lock the cluster may hold takes a key that
// is not UTF-8 in key_b64 (and list's after in after_b64), never both.
func TestBodiesKeepTheKeyRule(t *testing.T) {
	for _, tc := range []struct{ what, path, body, want string }{
		{"a key that is not UTF-8", "/v1/acquire", "{\"key\":\"u8/\xff\xfe\",\"lease_ms\":1000}", "key must be valid UTF-8 without NUL"},
		{"a lone surrogate escape", "/v1/acquire", `{"key":"u8/\udcff","lease_ms":1000}`, "key must be valid UTF-8 without NUL"},
		{"a NUL", "/v1/acquire", `{"key":"a\u0000b","lease_ms":1000}`, "key must be valid UTF-8 without NUL"},
		{"an owner that is not UTF-8", "/v1/acquire", "{\"key\":\"k\",\"lease_ms\":1000,\"owner\":\"\xff\"}", `bad request body: "owner" must be valid UTF-8`},
		{"a get's key that is not UTF-8", "/v1/get", "{\"key\":\"u8/\xff\"}", "key must be valid UTF-8 without NUL"},
		{"key and key_b64", "/v1/get", `{"key":"k","key_b64":"aw=="}`, "give key or key_b64, not both"},
		{"key_b64 that is not base64", "/v1/release", `{"key_b64":"!","token":1}`, "key_b64 must be standard base64: illegal base64 data at input byte 0"},
		{"after and after_b64", "/v1/list", `{"after":"a","after_b64":"YQ=="}`, "give after or after_b64, not both"},
		{"key_b64 on an acquire", "/v1/acquire", `{"key_b64":"aw==","lease_ms":1000}`, `bad request body: unknown field "key_b64"`},
	} {
		b := &fakeBackend{resp: wire.Response{Op: wire.OpGranted}}
		rec := serve(t, NewWithBackend(b, server.Limits{}), tc.path, tc.body)
		if got := answerOf(t, rec); rec.Code != 400 || got.Error != "invalid-argument" || got.Message != tc.want {
			t.Errorf("%s: %d %+v, want 400 %q", tc.what, rec.Code, got, tc.want)
		}
		if b.got != nil {
			t.Errorf("%s reached the member: %+v", tc.what, b.got)
		}
	}

	// Text that merely holds U+FFFD, written or escaped, is text.
	for _, body := range []string{`{"key":"a\ufffdb","lease_ms":1000}`, "{\"key\":\"a\uFFFDb\",\"lease_ms\":1000}", `{"key":"a\\ufffd","lease_ms":1000}`} {
		b := &fakeBackend{resp: wire.Response{Op: wire.OpGranted, Token: 1, LeaseMS: 1000}}
		if rec := serve(t, NewWithBackend(b, server.Limits{}), "/v1/acquire", body); rec.Code != 200 {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body.String())
		}
	}

	const old = "u8/\xff\xfe"
	for _, tc := range []struct{ path, body string }{
		{"/v1/get", `{"key_b64":"dTgv//4="}`},
		{"/v1/release", `{"key_b64":"dTgv//4=","token":3}`},
		{"/v1/release", `{"key_b64":"dTgv//4=","force":true}`},
		{"/v1/renew", `{"key_b64":"dTgv//4=","token":3,"lease_ms":1000}`},
	} {
		ok := map[string]wire.Op{"/v1/get": wire.OpValue, "/v1/release": wire.OpReleased, "/v1/renew": wire.OpRenewed}[tc.path]
		b := &fakeBackend{resp: wire.Response{Op: ok, Held: true, Token: 3}}
		rec := serve(t, NewWithBackend(b, server.Limits{}), tc.path, tc.body)
		if rec.Code != 200 || b.got.Key != old {
			t.Errorf("%s %s: %d %s, the member asked for %q", tc.path, tc.body, rec.Code, rec.Body.String(), b.got.Key)
		}
		var ans map[string]any
		json.Unmarshal(rec.Body.Bytes(), &ans)
		if ans["key"] != "u8/\uFFFD\uFFFD" || ans["key_b64"] != "dTgv//4=" {
			t.Errorf("%s: answer %s, want the key as text and key_b64", tc.path, rec.Body.String())
		}
	}
	b := &fakeBackend{resp: wire.Response{Op: wire.OpLocks, Locks: []wire.Lock{{Key: old, Token: 3}}, More: true}}
	rec := serve(t, NewWithBackend(b, server.Limits{}), "/v1/list", `{"after_b64":"dTgv","limit":1}`)
	if b.got.After != "u8/" || !strings.Contains(rec.Body.String(), `"next":"u8/\ufffd\ufffd","next_b64":"dTgv//4="`) ||
		!strings.Contains(rec.Body.String(), `"key_b64":"dTgv//4="`) {
		t.Errorf("list after %q: %s", b.got.After, rec.Body.String())
	}
}

// A query parameter nobody reads is refused, as an unknown body field is:
// GET /v1/watch?prefx=a would otherwise watch every key.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	for _, tc := range []struct{ method, target, want string }{
		{http.MethodGet, "/v1/watch?prefx=a", `unknown query parameter "prefx": the parameters are prefix, after`},
		{http.MethodGet, "/v1/watch?prefix=a&prefix=b", `query parameter "prefix" given 2 times`},
		{http.MethodGet, "/v1/watch?prefix=%zz", `bad query string: invalid URL escape "%zz"`},
		{http.MethodPost, "/v1/get?key=k", `unknown query parameter "key": the call's arguments are its JSON body`},
	} {
		b := &fakeBackend{resp: wire.Response{Op: wire.OpValue}}
		rec := httptest.NewRecorder()
		NewWithBackend(b, server.Limits{}).ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, strings.NewReader(`{"key":"k"}`)))
		if got := answerOf(t, rec); rec.Code != 400 || got.Error != "invalid-argument" || got.Message != tc.want {
			t.Errorf("%s %s: %d %+v, want 400 %q", tc.method, tc.target, rec.Code, got, tc.want)
		}
		if b.got != nil {
			t.Errorf("%s %s reached the member: %+v", tc.method, tc.target, b.got)
		}
	}
}

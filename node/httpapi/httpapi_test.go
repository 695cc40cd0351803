package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
)

// apiCluster is an in-process cluster whose members serve the API.
type apiCluster struct {
	*nodetest.Cluster
	apis map[uint64]string // each member's API address
}

// newAPICluster starts size members, each serving the API on an address
// it announces to the others; tune, if not nil, adjusts each member.
func newAPICluster(t *testing.T, size int, tune func(*node.Config)) *apiCluster {
	t.Helper()
	c, apis := nodetest.NewWithAPI(t, size, tune)
	return &apiCluster{Cluster: c, apis: apis}
}

// url is member id's API path.
func (c *apiCluster) url(id uint64, path string) string { return "http://" + c.apis[id] + path }

// answer is one API answer: its status, headers and JSON object.
type answer struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
}

// noRedirects is a client that shows a 307 instead of following it.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// post posts body to url with client cl and reads the JSON answer.
func post(t *testing.T, cl *http.Client, url, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("POST %s %s: %v", url, body, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("POST %s %s: %d answer %q is no JSON object: %v", url, body, a.code, raw, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("POST %s: Content-Type %q", url, ct)
	}
	return a
}

// expect checks a's status and that its fields are exactly fields (nil:
// any), with the values want gives (JSON numbers as float64).
func (a answer) expect(t *testing.T, what string, code int, fields []string, want map[string]any) {
	t.Helper()
	if a.code != code {
		t.Fatalf("%s: status %d (%s), want %d", what, a.code, a.raw, code)
	}
	if got := slices.Sorted(maps.Keys(a.body)); fields != nil && !slices.Equal(got, slices.Sorted(slices.Values(fields))) {
		t.Errorf("%s: fields %v, want %v (%s)", what, got, fields, a.raw)
	}
	for k, v := range want {
		if a.body[k] != v {
			t.Errorf("%s: %s is %v, want %v (%s)", what, k, a.body[k], v, a.raw)
		}
	}
}

// expectError checks a is the error name with status code, a one-line
// message, and Retry-After only when the call is safe to retry.
func (a answer) expectError(t *testing.T, what string, code int, name string) {
	t.Helper()
	a.expect(t, what, code, []string{"error", "message"}, map[string]any{"error": name})
	if msg, _ := a.body["message"].(string); msg == "" || strings.Contains(msg, "\n") {
		t.Errorf("%s: message %q is not one line", what, msg)
	}
	if retry := a.header.Get("Retry-After"); (retry != "") != (code == http.StatusServiceUnavailable) {
		t.Errorf("%s: %d with Retry-After %q", what, code, retry)
	}
}

// Every call's success on the leader, with its exact fields, and the
// answers of a lock held, a wrong token, bad input and a wrong method or
// path.
func TestEveryCallAndItsErrors(t *testing.T) {
	c := newAPICluster(t, 3, nil)
	id := c.WaitLeader().ID()
	at := func(path string) string { return c.url(id, path) }
	cl := http.DefaultClient

	a := post(t, cl, at("/v1/acquire"), `{"key":"jobs/a","lease_ms":10000,"owner":"builder"}`)
	a.expect(t, "acquire", 200, []string{"key", "token", "lease_ms"}, map[string]any{"key": "jobs/a", "lease_ms": 10000.0})
	tok := a.body["token"].(float64)
	post(t, cl, at("/v1/acquire"), `{"key":"jobs/a","lease_ms":10000}`).expectError(t, "acquire of a held key", 409, "held")

	g := post(t, cl, at("/v1/get"), `{"key":"jobs/a"}`)
	g.expect(t, "get", 200, []string{"key", "held", "token", "remaining_ms", "owner"}, map[string]any{"key": "jobs/a", "held": true, "token": tok, "owner": "builder"})
	if ms := g.body["remaining_ms"].(float64); ms <= 0 || ms > 10000 {
		t.Errorf("get: remaining_ms %v", ms)
	}
	post(t, cl, at("/v1/renew"), `{"key":"jobs/a","token":`+num(tok)+`,"lease_ms":20000}`).
		expect(t, "renew", 200, []string{"key", "token", "lease_ms"}, map[string]any{"key": "jobs/a", "token": tok, "lease_ms": 20000.0})
	post(t, cl, at("/v1/renew"), `{"key":"jobs/a","token":`+num(tok+1)+`,"lease_ms":20000}`).expectError(t, "renew with a wrong token", 404, "not-found")

	post(t, cl, at("/v1/acquire"), `{"key":"jobs/b","lease_ms":10000}`).expect(t, "acquire b", 200, []string{"key", "token", "lease_ms"}, nil)
	post(t, cl, at("/v1/acquire"), `{"key":"other","lease_ms":10000}`).expect(t, "acquire other", 200, []string{"key", "token", "lease_ms"}, nil)
	l := post(t, cl, at("/v1/list"), `{"prefix":"jobs/","limit":1}`)
	l.expect(t, "list", 200, []string{"locks", "more", "next"}, map[string]any{"more": true, "next": "jobs/a"})
	locks := l.body["locks"].([]any)
	if len(locks) != 1 {
		t.Fatalf("list: %d locks, want 1", len(locks))
	}
	lock := locks[0].(map[string]any)
	if got := slices.Sorted(maps.Keys(lock)); !slices.Equal(got, []string{"key", "owner", "remaining_ms", "token"}) || lock["key"] != "jobs/a" || lock["owner"] != "builder" || lock["token"] != tok {
		t.Errorf("list: lock %v", lock)
	}
	l = post(t, cl, at("/v1/list"), `{"prefix":"jobs/","limit":1,"after":"jobs/a"}`)
	l.expect(t, "list's last page", 200, []string{"locks", "more"}, map[string]any{"more": false})
	if locks := l.body["locks"].([]any); len(locks) != 1 || locks[0].(map[string]any)["key"] != "jobs/b" {
		t.Errorf("list's last page: %s", l.raw)
	}
	l = post(t, cl, at("/v1/list"), `{"prefix":"nothing/"}`)
	l.expect(t, "an empty list", 200, []string{"locks", "more"}, map[string]any{"more": false})
	if locks, ok := l.body["locks"].([]any); !ok || len(locks) != 0 {
		t.Errorf("an empty list's locks are not []: %s", l.raw)
	}

	post(t, cl, at("/v1/release"), `{"key":"jobs/a","token":`+num(tok+1)+`}`).expectError(t, "release with a wrong token", 404, "not-found")
	post(t, cl, at("/v1/release"), `{"key":"jobs/a","token":`+num(tok)+`}`).
		expect(t, "release", 200, []string{"key", "token", "released"}, map[string]any{"key": "jobs/a", "token": tok, "released": true})
	post(t, cl, at("/v1/get"), `{"key":"jobs/a"}`).expect(t, "get of a free key", 200, []string{"key", "held", "token", "remaining_ms"}, map[string]any{"held": false})

	// status answers what the HTTP port's /status does.
	st := post(t, cl, at("/v1/status"), "")
	rec := httptest.NewRecorder()
	server.HTTPHandler(c.Node(id)).ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	var want map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &want); err != nil {
		t.Fatal(err)
	}
	st.expect(t, "status", 200, slices.Collect(maps.Keys(want)), map[string]any{"id": want["id"], "role": "leader"})
	post(t, cl, at("/v1/status"), "{}").expect(t, "status with {}", 200, slices.Collect(maps.Keys(want)), nil)

	for _, tc := range []struct{ what, path, body string }{
		{"bad JSON", "/v1/acquire", `{"key":`},
		{"an unknown field", "/v1/acquire", `{"key":"a","lease_ms":10000,"force":true}`},
		{"a wrong type", "/v1/release", `{"key":"a","token":"seven"}`},
		{"a negative number", "/v1/acquire", `{"key":"a","lease_ms":-1}`},
		{"two objects", "/v1/get", `{"key":"a"}{"key":"b"}`},
		{"an array", "/v1/get", `["a"]`},
		{"an over-long key", "/v1/get", `{"key":"` + strings.Repeat("k", 257) + `"}`},
		{"no key", "/v1/release", `{"token":1}`},
		{"a lease out of bounds", "/v1/acquire", `{"key":"a","lease_ms":5}`},
		{"an over-long owner", "/v1/acquire", `{"key":"a","lease_ms":10000,"owner":"` + strings.Repeat("o", 129) + `"}`},
		{"a list limit out of bounds", "/v1/list", `{"limit":100000}`},
		{"a status with arguments", "/v1/status", `{"verbose":true}`},
		{"a body past the limit", "/v1/get", `{"key":"` + strings.Repeat("k", httpapi.MaxBody) + `"}`},
	} {
		post(t, cl, at(tc.path), tc.body).expectError(t, tc.what, 400, "invalid-argument")
	}

	resp, err := http.Get(at("/v1/get"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/get: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	unknown := post(t, cl, at("/v1/lock"), `{}`)
	unknown.expectError(t, "an unknown path", 404, "invalid-argument")
	if !strings.Contains(unknown.raw, "/v1/status, GET /v1/locks/KEY and /v1/locks?prefix=P, and GET /v1/watch") {
		t.Errorf("an unknown path's answer does not list every call: %s", unknown.raw)
	}
}

func num(f float64) string { b, _ := json.Marshal(f); return string(b) }

// A follower relays every leader-only call to the leader and hands back
// its answer, so a client that does not follow redirects (Python's
// urllib on a POST, a stock client) can use any member; status is the
// member's own.
func TestFollowerRelaysToTheLeader(t *testing.T) {
	c := newAPICluster(t, 3, nil)
	leader := c.WaitLeader()
	f := c.Followers(leader)[0].ID()
	var a answer
	nodetest.WaitFor(t, 10*time.Second, "an acquire through the follower", func() bool {
		a = post(t, noRedirects, c.url(f, "/v1/acquire"), `{"key":"r","lease_ms":10000}`)
		return a.code == http.StatusOK
	})
	a.expect(t, "acquire through the follower", 200, []string{"key", "token", "lease_ms"}, map[string]any{"key": "r"})
	tok := num(a.body["token"].(float64))
	post(t, noRedirects, c.url(f, "/v1/get"), `{"key":"r"}`).expect(t, "get through the follower", 200, []string{"key", "held", "token", "remaining_ms", "owner"}, map[string]any{"held": true})
	post(t, noRedirects, c.url(f, "/v1/acquire"), `{"key":"r","lease_ms":10000}`).expectError(t, "a held lock through the follower", 409, "held")
	post(t, noRedirects, c.url(f, "/v1/renew"), `{"key":"r","token":`+tok+`,"lease_ms":10000}`).expect(t, "renew through the follower", 200, nil, nil)
	post(t, noRedirects, c.url(f, "/v1/release"), `{"key":"r","token":`+tok+`}`).expect(t, "release through the follower", 200, nil, nil)
	post(t, noRedirects, c.url(f, "/v1/get"), `{"key":"r"}`).expect(t, "get after the release", 200, nil, map[string]any{"held": false})
	post(t, noRedirects, c.url(f, "/v1/status"), ``).expect(t, "a follower's status", 200, nil, map[string]any{"role": "follower", "id": float64(f)})
	if n := node.CounterValue(c.Node(f).Metrics().Forwarded.WithLabelValues("acquire", "granted")); n < 1 {
		t.Errorf("raftlock_forwarded_calls_total{op=acquire,result=granted} on the follower: %v", n)
	}
}

// A caller that follows redirects itself (raftlock-redirect: follow, as
// the Go API client sends) is sent to the leader's API address (307,
// same path) instead, which curl -L or Go's client reaches with the same
// body.
func TestFollowerRedirectsWhoFollows(t *testing.T) {
	c := newAPICluster(t, 3, nil)
	leader := c.WaitLeader()
	f := c.Followers(leader)[0].ID()
	want := c.url(leader.ID(), "/v1/acquire")
	follows := func(cl *http.Client) *http.Client {
		return &http.Client{CheckRedirect: cl.CheckRedirect, Transport: headerTransport{wire.RedirectHeader: wire.RedirectFollow}}
	}
	var a answer
	nodetest.WaitFor(t, 10*time.Second, "the follower to know the leader's API address", func() bool {
		a = post(t, follows(noRedirects), c.url(f, "/v1/acquire"), `{"key":"r","lease_ms":10000}`)
		return a.code == http.StatusTemporaryRedirect
	})
	if loc := a.header.Get("Location"); loc != want {
		t.Errorf("redirect to %q, want %q", loc, want)
	}
	a.expect(t, "redirect", 307, []string{"leader_id", "location"}, map[string]any{"leader_id": float64(leader.ID()), "location": want})
	post(t, follows(http.DefaultClient), c.url(f, "/v1/acquire"), `{"key":"r","lease_ms":10000}`).
		expect(t, "acquire following the redirect", 200, []string{"key", "token", "lease_ms"}, map[string]any{"key": "r"})
}

// headerTransport sets its headers on every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A member's limit hit answers 503 overloaded with Retry-After: nothing
// was proposed, a retry is safe.
func TestOverloadedIsRetryable(t *testing.T) {
	c := newAPICluster(t, 1, func(cfg *node.Config) { cfg.Limits.MaxKeys = 1 })
	id := c.WaitLeader().ID()
	post(t, http.DefaultClient, c.url(id, "/v1/acquire"), `{"key":"a","lease_ms":10000}`).expect(t, "acquire", 200, []string{"key", "token", "lease_ms"}, nil)
	post(t, http.DefaultClient, c.url(id, "/v1/acquire"), `{"key":"b","lease_ms":10000}`).expectError(t, "acquire past --max-keys", 503, "overloaded")
}

// Rule guarded (7): a waiting acquire whose HTTP caller hangs up leaves
// the queue, so the release it waited for frees the key instead of
// granting it to nobody for an hour.
func TestWaitingAcquireLeavesWhenItsCallerHangsUp(t *testing.T) {
	c := newAPICluster(t, 3, nil)
	leader := c.WaitLeader()
	at := func(path string) string { return c.url(leader.ID(), path) }
	tok := post(t, http.DefaultClient, at("/v1/acquire"), `{"key":"q","lease_ms":10000}`).body["token"].(float64)

	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, at("/v1/acquire"), strings.NewReader(`{"key":"q","lease_ms":3600000,"wait_ms":60000}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = errors.New("answered " + resp.Status)
		}
		done <- err
	}()
	waiters := func() float64 {
		var m dto.Metric
		leader.Metrics().Waiters.Write(&m)
		return m.GetGauge().GetValue()
	}
	nodetest.WaitFor(t, 10*time.Second, "the acquire to wait in the queue", func() bool { return waiters() == 1 })
	hangUp()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting acquire ended with %v, want the caller's cancel", err)
	}
	nodetest.WaitFor(t, 10*time.Second, "the waiter to leave the queue", func() bool { return waiters() == 0 })

	post(t, http.DefaultClient, at("/v1/release"), `{"key":"q","token":`+num(tok)+`}`).expect(t, "release", 200, []string{"key", "token", "released"}, nil)
	post(t, http.DefaultClient, at("/v1/get"), `{"key":"q"}`).expect(t, "get after the release", 200, []string{"key", "held", "token", "remaining_ms"}, map[string]any{"held": false})
}

// The port speaks HTTP/2 without TLS to a client that knows it does
// (h2c, as gRPC clients do), beside HTTP/1.1.
func TestHTTP2WithoutTLS(t *testing.T) {
	c := newAPICluster(t, 1, nil)
	id := c.WaitLeader().ID()
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	resp, err := h2c.Post(c.url(id, "/v1/get"), "application/json", bytes.NewReader([]byte(`{"key":"x"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("h2c get: %s over %s", resp.Status, resp.Proto)
	}
}

// A release with force ends the holder's hold whatever its token and
// answers that token (rule 12: the admin right, which a member without an
// ACL gives everyone); tags reach the member's log with their commands,
// for the chaos harness's audit. force with a token is refused.
func TestForcedReleaseAndTagsReachTheLog(t *testing.T) {
	c := newAPICluster(t, 1, nil)
	leader := c.WaitLeader()
	at := func(path string) string { return c.url(leader.ID(), path) }
	tok := post(t, http.DefaultClient, at("/v1/acquire"), `{"key":"f","lease_ms":3600000,"tag":11}`).body["token"].(float64)
	post(t, http.DefaultClient, at("/v1/renew"), `{"key":"f","token":`+num(tok)+`,"lease_ms":3600000,"tag":12}`).expect(t, "renew", 200, nil, nil)
	post(t, http.DefaultClient, at("/v1/release"), `{"key":"f","token":`+num(tok)+`,"force":true}`).expectError(t, "force with a token", 400, "invalid-argument")
	post(t, http.DefaultClient, at("/v1/release"), `{"key":"f","force":true,"tag":13}`).
		expect(t, "forced release", 200, []string{"key", "token", "released"}, map[string]any{"key": "f", "token": tok, "released": true})
	post(t, http.DefaultClient, at("/v1/release"), `{"key":"f","force":true}`).expectError(t, "forced release of a free key", 404, "not-found")

	tags := nodetest.LoggedTags(t, leader, "f")
	if want := map[string]uint64{"grant": 11, "renew": 12, "release": 13}; !maps.Equal(tags, want) {
		t.Errorf("tags in the log %v, want %v", tags, want)
	}
}

// getJSON GETs url and reads the JSON answer.
func getJSON(t *testing.T, url string) answer {
	t.Helper()
	resp, err := noRedirects.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("GET %s: %d answer %q is no JSON object: %v", url, a.code, raw, err)
	}
	return a
}

// Reads are GETs too, on any member: GET /v1/locks/KEY answers as POST
// /v1/get, GET /v1/locks?prefix=P&limit=N&after=A as POST /v1/list, and a
// wrong parameter or method is refused saying so.
func TestReadsAreGETs(t *testing.T) {
	c := newAPICluster(t, 3, nil)
	leader := c.WaitLeader()
	l := leader.ID()
	a := post(t, http.DefaultClient, c.url(l, "/v1/acquire"), `{"key":"jobs/a b/c","lease_ms":10000,"owner":"me"}`)
	a.expect(t, "acquire", 200, nil, nil)
	post(t, http.DefaultClient, c.url(l, "/v1/acquire"), `{"key":"jobs/z","lease_ms":10000}`).expect(t, "acquire", 200, nil, nil)
	for _, id := range c.IDs() {
		var got answer
		nodetest.WaitFor(t, 10*time.Second, "a GET of a lock", func() bool {
			got = getJSON(t, c.url(id, "/v1/locks/jobs/a%20b/c"))
			return got.code == 200
		})
		got.expect(t, "GET /v1/locks/KEY", 200, []string{"key", "held", "token", "remaining_ms", "owner"},
			map[string]any{"key": "jobs/a b/c", "held": true, "token": a.body["token"], "owner": "me"})
		page := getJSON(t, c.url(id, "/v1/locks?prefix=jobs/&limit=1"))
		page.expect(t, "GET /v1/locks?prefix=jobs/&limit=1", 200, []string{"locks", "more", "next"}, map[string]any{"more": true, "next": "jobs/a b/c"})
		rest := getJSON(t, c.url(id, "/v1/locks?prefix=jobs/&after=jobs/a%20b/c"))
		rest.expect(t, "the next page", 200, []string{"locks", "more"}, map[string]any{"more": false})
		if locks := rest.body["locks"].([]any); len(locks) != 1 || locks[0].(map[string]any)["key"] != "jobs/z" {
			t.Errorf("member %d: the next page: %s", id, rest.raw)
		}
		getJSON(t, c.url(id, "/v1/locks/free")).expect(t, "GET of a free key", 200, nil, map[string]any{"held": false})
	}
	getJSON(t, c.url(l, "/v1/locks?prefx=jobs/")).expectError(t, "a misspelt parameter", 400, "invalid-argument")
	getJSON(t, c.url(l, "/v1/locks?limit=many")).expectError(t, "a limit that is no number", 400, "invalid-argument")
	getJSON(t, c.url(l, "/v1/locks/jobs/z?stale=1")).expectError(t, "a parameter on a get", 400, "invalid-argument")
	getJSON(t, c.url(l, "/v1/locks/")).expectError(t, "an empty key", 400, "invalid-argument")
	post(t, noRedirects, c.url(l, "/v1/locks/jobs/z"), `{}`).expectError(t, "a POST of a read", 405, "invalid-argument")
}

// A number may come as a decimal string too, as proto3's JSON mapping
// writes a uint64 (gRPC's JSON clients send tokens so); answers keep
// numbers.
func TestNumbersAsStrings(t *testing.T) {
	c := newAPICluster(t, 1, nil)
	at := func(path string) string { return c.url(c.WaitLeader().ID(), path) }
	a := post(t, http.DefaultClient, at("/v1/acquire"), `{"key":"s","lease_ms":"10000","wait_ms":"0","tag":"3"}`)
	a.expect(t, "acquire with numbers as strings", 200, nil, map[string]any{"lease_ms": float64(10000)})
	tok := fmt.Sprintf("%q", num(a.body["token"].(float64)))
	post(t, http.DefaultClient, at("/v1/renew"), `{"key":"s","token":`+tok+`,"lease_ms":"20000"}`).expect(t, "renew with a string token", 200, nil, map[string]any{"lease_ms": float64(20000)})
	post(t, http.DefaultClient, at("/v1/release"), `{"key":"s","token":`+tok+`}`).expect(t, "release with a string token", 200, nil, map[string]any{"released": true})
	for body, want := range map[string]string{
		`{"key":"s","token":"seven"}`: `bad request body: "token" must be a whole number, 0 or more, got string "seven"`,
		`{"key":"s","token":true}`:    `bad request body: "token" must be a whole number, 0 or more, got bool true`,
		`{"key":"s","token":"-1"}`:    `bad request body: "token" must be a whole number, 0 or more, got string "-1"`,
	} {
		e := post(t, http.DefaultClient, at("/v1/release"), body)
		e.expectError(t, body, 400, "invalid-argument")
		if e.body["message"] != want {
			t.Errorf("%s: %q, want %q", body, e.body["message"], want)
		}
	}
}

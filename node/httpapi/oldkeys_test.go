package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node/nodetest"
)

// A key stored before the key rule, not UTF-8 (planted here below the
// entries, through the node), is listed (key as text beside key_b64, the
// page's next in next_b64, the next page after_b64), watched, read and
// released by key_b64, and forced free so too; the watch goes on past its
// events.
func TestStoredKeyThatIsNotTextIsListedWatchedAndReleased(t *testing.T) {
	c := newAPICluster(t, 3, nil)
	leader := c.WaitLeader()
	f := c.Followers(leader)[0]
	s := openWatch(t, http.DefaultClient, c.url(f.ID(), "/v1/watch?prefix=u8/"))
	at := func(path string) string { return c.url(leader.ID(), path) }
	cl := http.DefaultClient

	ctx := nodetest.Context(t, 30*time.Second)
	// An overlong NUL: never UTF-8, and it sorts before "u8/中" (E4 B8 AD).
	const old, oldB64, text = "u8/\xc0\x80", "dTgvwIA=", "u8/\uFFFD\uFFFD"
	tok, err := leader.AcquireAs(ctx, old, "before-the-rule", 10*time.Minute, 0, 0)
	if err != nil {
		t.Fatalf("planting a key from before the rule: %v", err)
	}
	post(t, cl, at("/v1/acquire"), `{"key":"u8/中","lease_ms":600000}`).expect(t, "acquire u8/中", 200, nil, nil)

	l := post(t, cl, at("/v1/list"), `{"prefix":"u8/","limit":1}`)
	l.expect(t, "list", 200, []string{"locks", "more", "next", "next_b64"}, map[string]any{"more": true, "next": text, "next_b64": oldB64})
	lock := l.body["locks"].([]any)[0].(map[string]any)
	if lock["key"] != text || lock["key_b64"] != oldB64 || lock["token"] != float64(tok) || lock["owner"] != "before-the-rule" {
		t.Errorf("the listed old key: %v", lock)
	}
	l = post(t, cl, at("/v1/list"), `{"prefix":"u8/","after_b64":"`+oldB64+`"}`)
	l.expect(t, "the next page", 200, []string{"locks", "more"}, map[string]any{"more": false})
	if locks := l.body["locks"].([]any); len(locks) != 1 || locks[0].(map[string]any)["key"] != "u8/中" {
		t.Errorf("the page after the old key: %s", l.raw)
	}
	post(t, cl, at("/v1/list"), `{}`).expect(t, "list of every key", 200, nil, nil)

	post(t, cl, at("/v1/get"), `{"key_b64":"`+oldB64+`"}`).expect(t, "get by key_b64", 200,
		[]string{"key", "key_b64", "held", "token", "remaining_ms", "owner"}, map[string]any{"key": text, "key_b64": oldB64, "held": true, "token": float64(tok)})
	post(t, cl, at("/v1/get"), `{"key":"`+text+`"}`).expect(t, "get of the key as shown", 200, nil, map[string]any{"held": false})
	post(t, cl, at("/v1/release"), `{"key_b64":"`+oldB64+`","token":`+num(float64(tok))+`}`).expect(t, "release by key_b64", 200,
		[]string{"key", "key_b64", "token", "released"}, map[string]any{"key": text, "key_b64": oldB64, "released": true})

	tok2, err := leader.AcquireAs(ctx, old, "", 10*time.Minute, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	post(t, cl, at("/v1/release"), `{"key_b64":"`+oldB64+`","force":true}`).expect(t, "forced release by key_b64", 200, nil, map[string]any{"token": float64(tok2)})
	post(t, cl, at("/v1/get"), `{"key_b64":"`+oldB64+`"}`).expect(t, "get after the releases", 200, nil, map[string]any{"held": false})
	post(t, cl, at("/v1/release"), `{"key":"u8/中","force":true}`).expect(t, "release u8/中", 200, nil, nil)

	for _, want := range []struct {
		key, typ string
		token    uint64
	}{{old, "granted", tok}, {"u8/中", "granted", 0}, {old, "released", tok}, {old, "granted", tok2}, {old, "released", tok2}, {"u8/中", "released", 0}} {
		_, ev := s.next(t)
		b64 := map[string]any{old: oldB64}[want.key]
		shown := map[string]string{old: text}[want.key]
		if shown == "" {
			shown = want.key
		}
		if ev["type"] != want.typ || ev["key"] != shown || ev["key_b64"] != b64 || (want.token != 0 && ev["token"] != float64(want.token)) {
			t.Errorf("event %v, want %s of %q (key_b64 %v)", ev, want.typ, shown, b64)
		}
	}
}

// A number out of range is named as given, not as the value it would be
// clamped to ("got 1h0m0.001s", "got 1001"); one past uint64 as JSON
// gave it.
func TestNumbersOutOfRangeAreNamedAsGiven(t *testing.T) {
	c := newAPICluster(t, 1, nil)
	at := func(path string) string { return c.url(c.WaitLeader().ID(), path) }
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/acquire", `{"key":"k","lease_ms":18446744073709551615}`, "lease must be 10ms..1h, got 18446744073709551615ms"},
		{"/v1/renew", `{"key":"k","token":1,"lease_ms":18446744073709551615}`, "lease must be 10ms..1h, got 18446744073709551615ms"},
		{"/v1/list", `{"limit":18446744073709551615}`, "limit must be 1..1000, got 18446744073709551615"},
		{"/v1/list", `{"limit":18446744073709551616}`, `bad request body: "limit" must be a whole number, 0 or more, got number 18446744073709551616`},
	} {
		a := post(t, http.DefaultClient, at(tc.path), tc.body)
		a.expectError(t, tc.body, 400, "invalid-argument")
		if a.body["message"] != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.path, tc.body, a.body["message"], tc.want)
		}
	}
}

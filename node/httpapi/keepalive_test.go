package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// POST /v1/keepalive holds a lock past its lease, one JSON line per
// renewal, on any member, until the caller hangs up; the moment the lock
// is lost it ends with an error line naming it. One on a lock not held
// is an ordinary 404.
func TestKeepAliveOverHTTP(t *testing.T) {
	c := newAPICluster(t, 3, nil)
	leader := c.WaitLeader()
	f := c.Followers(leader)[0].ID()
	const lease = 600 // ms
	a := post(t, http.DefaultClient, c.url(leader.ID(), "/v1/acquire"), `{"key":"ka","lease_ms":600}`)
	a.expect(t, "acquire", 200, nil, nil)
	tok := num(a.body["token"].(float64))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url(f, "/v1/keepalive"), strings.NewReader(`{"key":"ka","token":`+tok+`,"lease_ms":600}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("keep-alive through a follower: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	start := time.Now()
	for n := 0; time.Since(start) < 3*lease*time.Millisecond; n++ {
		if !lines.Scan() {
			t.Fatalf("renewal %d: the stream ended: %v", n, lines.Err())
		}
		var r map[string]any
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil || r["key"] != "ka" || num(r["token"].(float64)) != tok {
			t.Fatalf("renewal %d: %q (%v)", n, lines.Text(), err)
		}
	}
	post(t, http.DefaultClient, c.url(leader.ID(), "/v1/get"), `{"key":"ka"}`).expect(t, "after three leases of keep-alive", 200, nil, map[string]any{"held": true})

	// Forced free: the keep-alive's last line says the lock is lost.
	post(t, http.DefaultClient, c.url(leader.ID(), "/v1/release"), `{"key":"ka","force":true}`).expect(t, "forced release", 200, nil, nil)
	var last map[string]any
	for lines.Scan() {
		last = nil
		json.Unmarshal(lines.Bytes(), &last)
	}
	if last["error"] != "not-found" || !strings.Contains(last["message"].(string), `lock "ka" lost`) {
		t.Errorf("the keep-alive of a lock forced free ended with %v, want a not-found line", last)
	}

	post(t, http.DefaultClient, c.url(f, "/v1/keepalive"), `{"key":"ka","token":`+tok+`,"lease_ms":600}`).expectError(t, "a keep-alive of a free lock", 404, "not-found")
	post(t, http.DefaultClient, c.url(f, "/v1/keepalive"), `{"key":"ka","token":1,"lease_ms":5}`).expectError(t, "a keep-alive with a 5 ms lease", 400, "invalid-argument")
}

package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
)

// sse is an open event stream of GET /v1/watch.
type sse struct {
	resp *http.Response
	r    *bufio.Reader
	id   string // the last message's id
}

// openWatch opens GET url with client cl, failing t unless it is a 200
// event stream; the stream closes with the test.
func openWatch(t *testing.T, cl *http.Client, url string) *sse {
	t.Helper()
	return openWatchFrom(t, cl, url, "")
}

// openWatchFrom is openWatch sending lastID as Last-Event-ID, as an
// EventSource does when it reconnects ("": none).
func openWatchFrom(t *testing.T, cl *http.Client, url, lastID string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %s, Content-Type %q", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	return &sse{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next reads the next message that is not a comment: its event name ("" for
// a lock event) and its data as a JSON object.
func (s *sse) next(t *testing.T) (string, map[string]any) {
	t.Helper()
	var name, data string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream ended: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && data != "":
			var v map[string]any
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatalf("event data %q is no JSON object: %v", data, err)
			}
			return name, v
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			s.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// A watch on a follower streams the events of the keys under its prefix,
// each with exactly the documented fields, and one the member cuts off
// (here: it stops) ends with an error event.
func TestWatchStreamsServerSentEvents(t *testing.T) {
	c := newAPICluster(t, 3, nil)
	leader := c.WaitLeader()
	f := c.Followers(leader)[0]
	s := openWatch(t, http.DefaultClient, c.url(f.ID(), "/v1/watch?prefix=jobs/"))
	lead := func(path string) string { return c.url(leader.ID(), path) }
	post(t, http.DefaultClient, lead("/v1/acquire"), `{"key":"other","lease_ms":10000}`).expect(t, "acquire other", 200, nil, nil)
	a := post(t, http.DefaultClient, lead("/v1/acquire"), `{"key":"jobs/a","lease_ms":10000,"owner":"ci"}`)
	a.expect(t, "acquire jobs/a", 200, nil, nil)
	tok := a.body["token"]
	post(t, http.DefaultClient, lead("/v1/release"), `{"key":"jobs/a","token":`+num(tok.(float64))+`}`).expect(t, "release", 200, nil, nil)
	fields := []string{"key", "type", "token", "owner", "lease_ms", "index"}
	var last float64
	for _, want := range []map[string]any{
		{"key": "jobs/a", "type": "granted", "token": tok, "owner": "ci", "lease_ms": float64(10000)},
		{"key": "jobs/a", "type": "released", "token": tok, "owner": "ci", "lease_ms": float64(10000)},
	} {
		name, ev := s.next(t)
		delete(ev, "seq") // the event's place in its index: there when not 0
		if got := slices.Sorted(maps.Keys(ev)); name != "" || !slices.Equal(got, slices.Sorted(slices.Values(fields))) {
			t.Fatalf("event %q with fields %v, want a lock event with %v", name, got, fields)
		}
		for k, v := range want {
			if ev[k] != v {
				t.Errorf("event %v: %s is %v, want %v", ev, k, ev[k], v)
			}
		}
		if idx := ev["index"].(float64); idx <= last {
			t.Errorf("event %v: index not above %v", ev, last)
		} else {
			last = idx
		}
	}
	c.StopMember(f.ID())
	name, ev := s.next(t)
	if name != "error" || ev["error"] != "unavailable" || ev["message"] == "" {
		t.Fatalf("the stream of a stopped member ended with %q %v, want an unavailable error event", name, ev)
	}
}

// A watch is a GET; a POST is refused.
func TestWatchIsAGet(t *testing.T) {
	c := newAPICluster(t, 1, nil)
	c.WaitLeader()
	post(t, http.DefaultClient, c.url(1, "/v1/watch"), `{}`).expectError(t, "POST /v1/watch", 405, "invalid-argument")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url(1, "/v1/watch?prefix="+strings.Repeat("x", 300)), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a prefix longer than a key: %s, want 400", resp.Status)
	}
}

// An EventSource that reconnects with the Last-Event-ID it last read
// gets every event it missed, exactly once and in order, at any member;
// one whose id the member's history no longer reaches back to gets 410
// compacted, naming what the member holds.
func TestWatchResumesFromLastEventID(t *testing.T) {
	c := newAPICluster(t, 3, func(cfg *node.Config) { cfg.WatchHistory = 16 })
	leader := c.WaitLeader()
	f := c.Followers(leader)[0]
	lead := func(path string) string { return c.url(leader.ID(), path) }
	s := openWatch(t, http.DefaultClient, c.url(f.ID(), "/v1/watch?prefix=s/"))
	acquire := func(key string) float64 {
		a := post(t, http.DefaultClient, lead("/v1/acquire"), `{"key":"`+key+`","lease_ms":60000}`)
		a.expect(t, "acquire "+key, 200, nil, nil)
		return a.body["token"].(float64)
	}
	acquire("s/0")
	acquire("s/1")
	s.next(t)
	firstID := s.id
	s.resp.Body.Close() // the connection drops after the first event
	acquire("s/2")
	acquire("s/3")
	// The second event (s/1) was sent but not read: resumed after the
	// first, it comes again, then the two missed while disconnected.
	for _, m := range c.Nodes() {
		r := openWatchFrom(t, http.DefaultClient, c.url(m.ID(), "/v1/watch?prefix=s/"), firstID)
		var keys []string
		for range 3 {
			_, ev := r.next(t)
			keys = append(keys, ev["key"].(string))
		}
		if strings.Join(keys, ",") != "s/1,s/2,s/3" {
			t.Fatalf("member %d: resumed after %s: %v, want s/1,s/2,s/3", m.ID(), firstID, keys)
		}
		r.resp.Body.Close()
	}
	// Past the history: 20 more events push the first ones out.
	for i := 4; i < 24; i++ {
		acquire(fmt.Sprintf("s/%d", i))
	}
	req, _ := http.NewRequest(http.MethodGet, lead("/v1/watch?prefix=s/&after="+firstID), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error, Message string }
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusGone || e.Error != "compacted" || !strings.Contains(e.Message, "list the locks again") {
		t.Errorf("a watch after %s, past the history: %s %+v, want 410 compacted", firstID, resp.Status, e)
	}
}

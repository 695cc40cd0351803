package apiclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/node/nodetest"
)

// lockCalls are the calls both clients have.
type lockCalls interface {
	AcquireWith(ctx context.Context, r client.AcquireRequest) (client.Grant, error)
	RenewTagged(ctx context.Context, key string, token uint64, lease time.Duration, tag uint64) error
	ReleaseTagged(ctx context.Context, key string, token, tag uint64) error
	Get(ctx context.Context, key string) (client.LockInfo, error)
	List(ctx context.Context, o client.ListOptions) (client.LockPage, error)
}

// apiClient is either client, with the calls both have.
type apiClient interface {
	lockCalls
	Close() error
}

// followerClient starts a three-member cluster serving the API, and a
// client of it (made by newClient) that knows only one follower's API
// port; the client closes when t ends.
func followerClient[C apiClient](t *testing.T, newClient func([]string, apiclient.Options) (C, error)) (*nodetest.Cluster, C) {
	t.Helper()
	c, apis := nodetest.NewWithAPI(t, 3, nodetest.RareElections)
	leader := c.WaitLeader()
	cl, err := newClient([]string{apis[c.Followers(leader)[0].ID()]}, apiclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return c, cl
}

// checkRetriedToToken5 checks that a retry rule (named in name) brought
// cl's acquire to the busy member's token 5 on its third request (busy
// counts them), and closes cl.
func checkRetriedToToken5(t *testing.T, name string, cl apiClient, busy *atomic.Int64) {
	t.Helper()
	defer cl.Close()
	g, err := cl.AcquireWith(nodetest.Context(t, 10*time.Second), client.AcquireRequest{Key: "k", Lease: time.Second})
	if err != nil || g.Token != 5 || busy.Load() != 3 {
		t.Errorf("%s: %+v, %v after %d requests to the busy member, want token 5 after 3", name, g, err, busy.Load())
	}
}

// checkLockCalls makes every call of cl on key "k" of cluster c, checks
// its answers and errors are the binary client's, and that the tags of
// those that changed the lock reached the leader's log.
func checkLockCalls(t *testing.T, c *nodetest.Cluster, cl lockCalls) {
	t.Helper()
	ctx := nodetest.Context(t, 30*time.Second)
	g, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: "k", Lease: time.Hour, Owner: "me", Tag: 7})
	if err != nil || g.Token == 0 || g.LeaseMS != 3600000 {
		t.Fatalf("acquire: %+v, %v", g, err)
	}
	if _, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: "k", Lease: time.Second}); !errors.Is(err, client.ErrHeld) {
		t.Errorf("acquire of a held key: %v, want ErrHeld", err)
	}
	if info, err := cl.Get(ctx, "k"); err != nil || !info.Held || info.Token != g.Token || info.Owner != "me" {
		t.Errorf("get: %+v, %v", info, err)
	}
	if err := cl.RenewTagged(ctx, "k", g.Token+1, time.Hour, 8); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("renew with a wrong token: %v, want ErrNotFound", err)
	}
	if err := cl.RenewTagged(ctx, "k", g.Token, time.Hour, 9); err != nil {
		t.Errorf("renew: %v", err)
	}
	page, err := cl.List(ctx, client.ListOptions{Limit: 10})
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "k" || page.Locks[0].Owner != "me" || page.More {
		t.Errorf("list: %+v, %v", page, err)
	}
	if err := cl.ReleaseTagged(ctx, "k", g.Token+1, 0); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("release with a wrong token: %v, want ErrNotFound", err)
	}
	if err := cl.ReleaseTagged(ctx, "k", g.Token, 10); err != nil {
		t.Errorf("release: %v", err)
	}
	var inv *client.InvalidArgumentError
	if _, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: "k", Lease: time.Millisecond}); !errors.As(err, &inv) {
		t.Errorf("acquire with a 1ms lease: %v, want an InvalidArgumentError", err)
	}
	if tags := nodetest.LoggedTags(t, c.WaitLeader(), "k"); tags["grant"] != 7 || tags["renew"] != 9 || tags["release"] != 10 {
		t.Errorf("tags in the log %v, want grant 7, renew 9, release 10", tags)
	}
}

// Every call of the HTTP client, through a follower (its 307 followed to
// the leader), with the binary client's errors and tags
// (checkLockCalls), and its forced release.
func TestHTTPCallsThroughAFollower(t *testing.T) {
	c, cl := followerClient(t, apiclient.NewHTTP)
	checkLockCalls(t, c, cl)
	ctx := nodetest.Context(t, 30*time.Second)
	g, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: "f", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := cl.ForceReleaseTagged(ctx, "f", 11); err != nil || tok != g.Token {
		t.Errorf("forced release: %d, %v, want %d", tok, err, g.Token)
	}
	if _, err := cl.ForceReleaseTagged(ctx, "f", 12); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("forced release of a free key: %v, want ErrNotFound", err)
	}
	if err := cl.ReleaseTagged(ctx, "f", g.Token, 13); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("release with the evicted token: %v, want ErrNotFound", err)
	}
}

// fake is a stand-in member whose answer to each request the test
// chooses; it counts the requests it got.
type fake struct {
	*httptest.Server
	n atomic.Int64
}

func newFake(t *testing.T, answer func(n int64, w http.ResponseWriter, r *http.Request)) *fake {
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		answer(f.n.Add(1), w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// hangUp closes the connection with no answer: the request reached the
// member, whatever it did with it.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func answer(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	io.WriteString(w, body)
}

// A lock-changing call that got no answer of raftlock's after the request
// went out is never sent again: it may have applied. A read is. No answer
// of raftlock's is a broken connection, or an answer without raftlock's
// JSON error body: a proxy's 502, 503 or 504 when the member behind it
// died, say (docs/http-api.md's errors), 503 included, which only with
// raftlock's body says that nothing was proposed.
func TestHTTPNeverResendsALockChangeWhoseOutcomeIsUnknown(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(w http.ResponseWriter)
	}{
		{"broken connection", hangUp},
		{"502 of a proxy", func(w http.ResponseWriter) { http.Error(w, "upstream connection reset", http.StatusBadGateway) }},
		{"503 of a proxy", func(w http.ResponseWriter) { http.Error(w, "no healthy upstream", http.StatusServiceUnavailable) }},
		{"504 of a proxy", func(w http.ResponseWriter) { http.Error(w, "upstream timed out", http.StatusGatewayTimeout) }},
		{"503 whose JSON is not raftlock's", func(w http.ResponseWriter) { answer(w, 503, `{"code":503,"reason":"draining"}`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(n int64, w http.ResponseWriter, r *http.Request) {
				if n == 1 || r.URL.Path != "/v1/get" {
					tc.fail(w)
					return
				}
				answer(w, 200, `{"key":"k","held":false,"token":0,"remaining_ms":0}`)
			})
			cl, err := apiclient.NewHTTP([]string{f.URL}, apiclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			checkUnanswered(t, cl, &f.n, "acquire", "release", "renew", "force release")
		})
	}
}

// checkUnanswered checks cl against a member that gives no answer of
// raftlock's to its first request and to the first after each reset of
// sent, its count of requests: a read is sent again and succeeds on the
// second request; each lock change named in changes fails with
// ErrOutcomeUnknown after one request.
func checkUnanswered(t *testing.T, cl apiClient, sent *atomic.Int64, changes ...string) {
	t.Helper()
	if _, err := cl.Get(nodetest.Context(t, 10*time.Second), "k"); err != nil || sent.Load() != 2 {
		t.Errorf("get after no answer of raftlock's: %v after %d requests, want a success on the second", err, sent.Load())
	}
	calls := map[string]func(context.Context) error{
		"acquire": func(ctx context.Context) error {
			_, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: "k", Lease: time.Second})
			return err
		},
		"release": func(ctx context.Context) error { return cl.ReleaseTagged(ctx, "k", 1, 0) },
		"renew":   func(ctx context.Context) error { return cl.RenewTagged(ctx, "k", 1, time.Second, 0) },
		"force release": func(ctx context.Context) error {
			_, err := cl.(*apiclient.HTTP).ForceReleaseTagged(ctx, "k", 0) // the gRPC API has none
			return err
		},
	}
	for _, name := range changes {
		sent.Store(0)
		if err := calls[name](nodetest.Context(t, 10*time.Second)); !errors.Is(err, client.ErrOutcomeUnknown) || sent.Load() != 1 {
			t.Errorf("%s without an answer of raftlock's: %v after %d requests, want ErrOutcomeUnknown after 1", name, err, sent.Load())
		}
	}
}

// 503 unavailable and overloaded say nothing was proposed: the call is
// asked again (an unavailable member's neighbour first) until it is
// answered; a member that refuses the connection is skipped.
func TestHTTPRetriesWhatWasNotProposed(t *testing.T) {
	granted := `{"key":"k","token":5,"lease_ms":1000}`
	busy := newFake(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if n <= 2 {
			answer(w, 503, `{"error":"overloaded","message":"busy"}`)
			return
		}
		answer(w, 200, granted)
	})
	down := newFake(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		answer(w, 503, `{"error":"unavailable","message":"no leader"}`)
	})
	refusing, err := freeport.Addr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		endpoints []string
	}{
		{"overloaded", []string{busy.URL}},
		{"unavailable then overloaded", []string{down.URL, busy.URL}},
		{"refused then overloaded", []string{refusing, busy.URL}},
	} {
		busy.n.Store(0)
		cl, err := apiclient.NewHTTP(tc.endpoints, apiclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkRetriedToToken5(t, tc.name, cl, &busy.n)
	}
	// The call's context ends between two attempts, after the second
	// answer (a deadline may as well pass with an attempt in flight, whose
	// outcome is then unknown).
	cl, err := apiclient.NewHTTP([]string{down.URL}, apiclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, end := context.WithCancel(nodetest.Context(t, 10*time.Second))
	answers := 0
	cl.SetBeforeBackoff(func(context.Context, error) {
		if answers++; answers == 2 {
			end()
		}
	})
	if _, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: "k", Lease: time.Second}); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no leader") {
		t.Errorf("acquire against a member that stays unavailable: %v, want its answer at the end of its context", err)
	}
}

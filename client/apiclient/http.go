package apiclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
)

// Options tune a client of the API port.
type Options struct {
	DialTimeout time.Duration // default 1s
	// TLS, when set, makes every connection mutual TLS with this
	// configuration (a client certificate and the cluster's CA), and a
	// bare host:port endpoint https.
	TLS *tls.Config
	// Relayed leaves out wire.RedirectHeader: a follower then relays
	// each call to the leader instead of redirecting the client, as it
	// does for a stock client (what raftlock chaos --pin-members tries).
	Relayed bool
}

// dialTimeout is DialTimeout, or its default.
func (o Options) dialTimeout() time.Duration {
	if o.DialTimeout <= 0 {
		return time.Second
	}
	return o.DialTimeout
}

// HTTP is a client of the HTTP/JSON API (docs/http-api.md). It is safe
// for concurrent use; each call runs on one of its pooled HTTP/1.1
// connections.
type HTTP struct {
	r       *retrier
	hc      *http.Client
	relayed bool // Options.Relayed
}

// NewHTTP returns a client of the members whose API ports are endpoints:
// http://host:port, https://host:port, or a bare host:port (https when
// opts.TLS is set).
func NewHTTP(endpoints []string, opts Options) (*HTTP, error) {
	scheme := "http://"
	if opts.TLS != nil {
		scheme = "https://"
	}
	r, err := newRetrier(endpoints, func(e string) string {
		if e = strings.TrimSpace(e); e != "" && !strings.Contains(e, "://") {
			e = scheme + e
		}
		return e
	})
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: opts.dialTimeout()}).DialContext,
		TLSClientConfig:     opts.TLS,
		TLSHandshakeTimeout: opts.dialTimeout(),
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
	}
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // the retry loop follows redirects, remembering the leader
	}}
	return &HTTP{r: r, hc: hc, relayed: opts.Relayed}, nil
}

// Close closes the client's idle connections; calls in flight go on.
func (c *HTTP) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// The bodies of the API's calls (node/httpapi's, as docs/http-api.md
// gives them).
type (
	httpLease struct {
		Token   uint64 `json:"token"`
		LeaseMS uint64 `json:"lease_ms"`
	}
	httpGet struct {
		Held        bool   `json:"held"`
		Token       uint64 `json:"token"`
		RemainingMS uint64 `json:"remaining_ms"`
		Owner       string `json:"owner"`
	}
	httpError struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
)

// AcquireWith takes r.Key (client.Client.AcquireWith), its tag recorded
// in the log.
func (c *HTTP) AcquireWith(ctx context.Context, r client.AcquireRequest) (client.Grant, error) {
	if err := validateAcquire(r); err != nil {
		return client.Grant{}, err
	}
	body := map[string]any{"key": r.Key, "lease_ms": r.Lease.Milliseconds(), "wait_ms": max(r.Wait, 0).Milliseconds(), "owner": r.Owner, "tag": r.Tag}
	var ans httpLease
	err := c.call(ctx, "/v1/acquire", body, &ans, false)
	return client.Grant{Token: ans.Token, LeaseMS: ans.LeaseMS}, err
}

// RenewTagged restarts the holder's lease (client.Client.RenewTagged).
func (c *HTTP) RenewTagged(ctx context.Context, key string, token uint64, lease time.Duration, tag uint64) error {
	if err := validate(key, &lease, ""); err != nil {
		return err
	}
	body := withKey(map[string]any{"token": token, "lease_ms": lease.Milliseconds(), "tag": tag}, "key", key)
	return c.call(ctx, "/v1/renew", body, &httpLease{}, false)
}

// ReleaseTagged gives key up (client.Client.ReleaseTagged).
func (c *HTTP) ReleaseTagged(ctx context.Context, key string, token, tag uint64) error {
	if err := validate(key, nil, ""); err != nil {
		return err
	}
	return c.call(ctx, "/v1/release", withKey(map[string]any{"token": token, "tag": tag}, "key", key), &httpLease{}, false)
}

// ForceReleaseTagged frees key whatever its token and returns the token
// it ended (client.Client.ForceReleaseTagged): the admin right.
func (c *HTTP) ForceReleaseTagged(ctx context.Context, key string, tag uint64) (uint64, error) {
	if err := validate(key, nil, ""); err != nil {
		return 0, err
	}
	var ans httpLease
	err := c.call(ctx, "/v1/release", withKey(map[string]any{"force": true, "tag": tag}, "key", key), &ans, false)
	return ans.Token, err
}

// Get reads key linearizably (client.Client.Get).
func (c *HTTP) Get(ctx context.Context, key string) (client.LockInfo, error) {
	if err := validate(key, nil, ""); err != nil {
		return client.LockInfo{}, err
	}
	var ans httpGet
	if err := c.call(ctx, "/v1/get", withKey(map[string]any{}, "key", key), &ans, true); err != nil {
		return client.LockInfo{}, err
	}
	return client.LockInfo{Held: ans.Held, Token: ans.Token, Owner: ans.Owner, RemainingMS: ans.RemainingMS}, nil
}

// List reads a page of the held locks linearizably (client.Client.List;
// the API has no stale read, so o.Stale reads through the leader too).
func (c *HTTP) List(ctx context.Context, o client.ListOptions) (client.LockPage, error) {
	if err := validateList(o); err != nil {
		return client.LockPage{}, err
	}
	var page client.LockPage
	body := withKey(map[string]any{"prefix": o.Prefix, "limit": o.Limit}, "after", o.After)
	if err := c.call(ctx, "/v1/list", body, &page, true); err != nil {
		return client.LockPage{}, err
	}
	return page, nil
}

// withKey is body with the key (or after) k in field, or in field_b64
// when k is not UTF-8 (a key stored before the key rule), which no JSON
// string carries.
func withKey(body map[string]any, field, k string) map[string]any {
	if b64 := wire.KeyB64(k); b64 != "" {
		body[field+"_b64"] = b64
	} else {
		body[field] = k
	}
	return body
}

// call posts body to path on the leader, retrying as the package says,
// and decodes a success into ans.
func (c *HTTP) call(ctx context.Context, path string, body, ans any, idempotent bool) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return c.r.do(ctx, idempotent, func(ctx context.Context, base string) attempt {
		return c.post(ctx, base, path, b, ans)
	})
}

// post is one attempt of a call at the member whose API is base.
func (c *HTTP) post(ctx context.Context, base, path string, body []byte, ans any) attempt {
	var sent atomic.Bool // set on the transport's goroutine
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return attempt{err: err} // a bad endpoint: no retry cures it
	}
	req.Header.Set("Content-Type", "application/json")
	// This client follows a follower's 307 itself: one hop fewer than
	// the follower relaying the call.
	if !c.relayed {
		req.Header.Set(wire.RedirectHeader, wire.RedirectFollow)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return attempt{err: err, failed: true, sent: sent.Load()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return attempt{err: fmt.Errorf("read the answer of %s: %w", base, err), failed: true, sent: true}
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if err := json.Unmarshal(raw, ans); err != nil {
			return attempt{err: fmt.Errorf("%s answered %s%s with %q: %w", base, base, path, raw, err), failed: true, sent: true}
		}
		return attempt{}
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		loc, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || loc.Host == "" {
			return attempt{err: fmt.Errorf("%s redirected to %q", base, resp.Header.Get("Location")), failed: true}
		}
		return attempt{redirect: loc.Scheme + "://" + loc.Host}
	}
	var e httpError
	if json.Unmarshal(raw, &e) != nil || e.Error == "" {
		// Not the API's answer (a proxy's 502, 503 or 504 as the member
		// behind it died, say): nothing says what happened, 503 or not.
		return attempt{err: fmt.Errorf("%s answered %s: %q", base, resp.Status, raw), failed: true, sent: true}
	}
	err, retry := errorOf(e.Error, e.Message)
	overloaded := e.Error == wire.ErrorNameOverloaded
	return attempt{err: err, overloaded: retry && overloaded, unavailable: retry && !overloaded}
}

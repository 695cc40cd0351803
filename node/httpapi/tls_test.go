package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node/nodetest"
)

// Under TLS the API port asks every caller for a client certificate,
// speaks HTTP/2 by ALPN, and runs each call as the certificate's identity
// under the member's ACL, as the client port does: an identity without
// the right gets 403 permission-denied, one without a certificate no
// connection.
func TestTLSIdentityAndACL(t *testing.T) {
	m := nodetest.StartTLSMember(t, `{"rules":[
		{"identity":"builder","prefixes":["jobs/"],"rights":["lock","read"]},
		{"identity":"reader","prefixes":[""],"rights":["read"]}]}`, "builder", "reader")
	clientAs := func(name string) *http.Client {
		tc := m.ClientTLS(t, name)
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
	}
	url := "https://" + m.API
	builder := clientAs("builder")
	var got answer
	nodetest.WaitFor(t, 10*time.Second, "the member to lead", func() bool {
		got = post(t, builder, url+"/v1/acquire", `{"key":"jobs/a","lease_ms":10000}`)
		return got.code != http.StatusServiceUnavailable
	})
	got.expect(t, "acquire by builder", 200, []string{"key", "token", "lease_ms"}, map[string]any{"key": "jobs/a"})

	resp, err := builder.Post(url+"/v1/get", "application/json", strings.NewReader(`{"key":"jobs/a"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("TLS call over %s, want HTTP/2 by ALPN", resp.Proto)
	}

	post(t, builder, url+"/v1/acquire", `{"key":"other","lease_ms":10000}`).expectError(t, "builder outside its prefix", 403, "permission-denied")
	reader := clientAs("reader")
	post(t, reader, url+"/v1/acquire", `{"key":"jobs/b","lease_ms":10000}`).expectError(t, "acquire by reader", 403, "permission-denied")
	post(t, reader, url+"/v1/get", `{"key":"jobs/a"}`).expect(t, "get by reader", 200, nil, map[string]any{"held": true})
	post(t, reader, url+"/v1/status", ``).expectError(t, "status without the admin right", 403, "permission-denied")
	openWatch(t, reader, url+"/v1/watch?prefix=jobs/")
	if resp, err := builder.Get(url + "/v1/watch?prefix=other/"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a watch outside the builder's read prefixes: %s, want 403", resp.Status)
	}

	if resp, err := clientAs("").Post(url+"/v1/get", "application/json", strings.NewReader(`{"key":"jobs/a"}`)); err == nil {
		resp.Body.Close()
		t.Errorf("a caller without a client certificate was answered %s", resp.Status)
	}
}

package httpapi_test

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/nodetest"
)

// Under TLS the API port asks every caller for a client certificate,
// speaks HTTP/2 by ALPN, and runs each call as the certificate's identity
// under the member's ACL, as the client port does: an identity without
// the right gets 403 permission-denied, one without a certificate no
// connection.
func TestTLSIdentityAndACL(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: certs, Members: 1, Clients: []string{"builder", "reader"}}); err != nil {
		t.Fatal(err)
	}
	acl := filepath.Join(dir, "acl.json")
	if err := os.WriteFile(acl, []byte(`{"rules":[
		{"identity":"builder","prefixes":["jobs/"],"rights":["lock","read"]},
		{"identity":"reader","prefixes":[""],"rights":["read"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a := freeport.ForIDs(t, 1, 2, 3)
	mb, err := embed.Start(embed.Config{
		Node:   node.Config{Config: member.Config{ID: 1, Peers: map[uint64]string{1: a[1]}}, DataDir: filepath.Join(dir, "data")},
		Listen: a[2], API: a[3],
		TLS: tlsconfig.Files{Cert: filepath.Join(certs, "member-1.pem"), Key: filepath.Join(certs, "member-1-key.pem"), CA: filepath.Join(certs, "ca.pem")},
		ACL: acl,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mb.Close)
	clientAs := func(name string) *http.Client {
		cert := "builder" // "": a certificate the caller then does not present
		if name != "" {
			cert = name
		}
		files := tlsconfig.Files{CA: filepath.Join(certs, "ca.pem"), Cert: filepath.Join(certs, "client-"+cert+".pem"), Key: filepath.Join(certs, "client-"+cert+"-key.pem")}
		tc, err := files.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		if name == "" {
			tc.Certificates, tc.GetClientCertificate = nil, nil
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
	}
	url := "https://" + a[3]
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

package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The web console of `raftlock node` under mutual TLS and an ACL: without
// a client certificate there is no page; with one, the members table is
// whole (the members ask each other for their status with their own
// certificates, which the ACL does not name) and the locks are those the
// identity may read.
func TestConsoleUnderTLSAndACL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	tc := newTLSCluster(t, `{"rules":[{"identity":"batch","prefixes":["jobs/"],"rights":["lock","read","admin"]},`+
		`{"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]}]}`)
	tc.acquire(t, "batch", "jobs/x")
	tc.acquire(t, "admin", "other/y")
	pem, err := os.ReadFile(filepath.Join(tc.certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	as := func(name string) *http.Client {
		cfg := &tls.Config{RootCAs: roots}
		if name != "" {
			cert, err := tls.LoadX509KeyPair(filepath.Join(tc.certs, "client-"+name+".pem"), filepath.Join(tc.certs, "client-"+name+"-key.pem"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	base := "https://" + tc.members[0].httpAddr
	get := func(who, path string, out any) int {
		t.Helper()
		resp, err := as(who).Get(base + path)
		if err != nil {
			t.Fatalf("GET %s as %s: %v", path, who, err)
		}
		defer resp.Body.Close()
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatalf("GET %s as %s: %d: %v", path, who, resp.StatusCode, err)
			}
		}
		return resp.StatusCode
	}

	if resp, err := as("").Get(base + "/"); err == nil {
		resp.Body.Close()
		t.Fatalf("the console answered %d without a client certificate", resp.StatusCode)
	}
	if code := get("admin", "/", nil); code != http.StatusOK {
		t.Fatalf("GET / as admin: %d", code)
	}
	var cl struct {
		Leader  uint64
		Members []struct {
			ID                  uint64
			Role, Health, Error string
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		get("admin", "/console/api/cluster", &cl)
		healthy := 0
		for _, m := range cl.Members {
			if m.Health == "healthy" {
				healthy++
			}
		}
		if healthy == 3 && cl.Leader != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members table never showed 3 healthy members: %+v", cl)
		}
		time.Sleep(200 * time.Millisecond)
	}

	var page struct {
		Locks []struct{ Key string }
	}
	keys := func() []string {
		var ks []string
		for _, l := range page.Locks {
			ks = append(ks, l.Key)
		}
		return ks
	}
	if code := get("batch", "/console/api/locks", nil); code != http.StatusForbidden {
		t.Errorf("batch listing every key: %d, want 403", code)
	}
	if code := get("batch", "/console/api/locks?prefix=jobs/", &page); code != http.StatusOK || !slices.Equal(keys(), []string{"jobs/x"}) {
		t.Errorf("batch listing jobs/: %d %v", code, keys())
	}
	if get("admin", "/console/api/locks", &page); !slices.Equal(keys(), []string{"jobs/x", "other/y"}) {
		t.Errorf("admin listing every key: %v", keys())
	}
}

package console_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/console"
	"github.com/raftlock/raftlock/node/embed"
)

// The console as `raftlock node` serves it (node/embed), under mutual TLS
// and an ACL: without a client certificate there is no page; with one,
// the members table is whole (the members ask each other for their status
// with their own certificates, which the ACL does not name) and the locks
// are those the identity may read.
func TestConsoleUnderTLSAndACL(t *testing.T) {
	certs, dir := t.TempDir(), t.TempDir()
	if _, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: certs, Members: 3, Clients: []string{"admin", "batch"}}); err != nil {
		t.Fatal(err)
	}
	acl := filepath.Join(certs, "acl.json")
	if err := os.WriteFile(acl, []byte(`{"rules":[{"identity":"batch","prefixes":["jobs/"],"rights":["lock","read","admin"]},`+
		`{"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	peers, clients, https := freeport.ForIDs(t, 1, 2, 3), freeport.ForIDs(t, 1, 2, 3), freeport.ForIDs(t, 1, 2, 3)
	members, err := embed.StartLocal(dir, 3, func(id int) (embed.Config, error) {
		file := func(name string) string { return filepath.Join(certs, name) }
		return embed.Config{
			Node:   node.Config{Config: member.Config{ID: uint64(id), Peers: peers}, DataDir: embed.LocalDataDir(dir, id)},
			Listen: clients[uint64(id)], HTTP: https[uint64(id)], ACL: acl,
			TLS: tlsconfig.Files{Cert: file(tlsconfig.MemberCommonName(uint64(id)) + ".pem"),
				Key: file(tlsconfig.MemberCommonName(uint64(id)) + "-key.pem"), CA: file("ca.pem")},
		}, nil
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, mb := range members {
			mb.Close()
		}
	})
	pem, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	as := func(name string) *http.Client {
		cfg := &tls.Config{RootCAs: roots}
		if name != "" {
			cert, err := tls.LoadX509KeyPair(filepath.Join(certs, "client-"+name+".pem"), filepath.Join(certs, "client-"+name+"-key.pem"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	base := "https://" + https[1]
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
	var cl console.Cluster
	deadline := time.Now().Add(30 * time.Second)
	for {
		get("admin", "/console/api/cluster", &cl)
		healthy := 0
		for _, m := range cl.Members {
			if m.Health == console.Healthy {
				healthy++
			}
		}
		if healthy == 3 && cl.Leader != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members table never showed 3 healthy members: %+v", cl.Members)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, mb := range members {
		if mb.Node().ID() == cl.Leader {
			hold(t, mb.Node(), "jobs/x", "other/y")
		}
	}
	var page console.Locks
	if code := get("batch", "/console/api/locks", nil); code != http.StatusForbidden {
		t.Errorf("batch listing every key: %d, want 403", code)
	}
	// The stale read of member 1 may trail the leader's grants briefly.
	for end := time.Now().Add(20 * time.Second); ; {
		if get("admin", "/console/api/locks", &page); slices.Equal(keysOf(page), []string{"jobs/x", "other/y"}) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("admin listing every key: %v", keysOf(page))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := get("batch", "/console/api/locks?prefix=jobs/", &page); code != http.StatusOK || !slices.Equal(keysOf(page), []string{"jobs/x"}) {
		t.Errorf("batch listing jobs/: %d %v", code, keysOf(page))
	}
}

package embed

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// --insecure starts a member on a non-loopback address with a loud
// warning; loopback-only members need nothing; certificates must be all
// three and this member's; a bad ACL file refuses the start.
func TestSecurityChecks(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	check := func(c Config) (*Member, error) {
		mb := &Member{cfg: c, log: log}
		_, err := mb.loadSecurity()
		return mb, err
	}
	if _, err := check(Config{Node: node.Config{Config: member.Config{ID: 1, Peers: map[uint64]string{1: "10.0.0.1:7001"}}}, Listen: "0.0.0.0:8001", Insecure: true}); err != nil {
		t.Fatalf("--insecure: %v", err)
	}
	if !strings.Contains(logs.String(), "INSECURE") || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("--insecure logged no loud warning: %q", logs.String())
	}
	logs.Reset()
	if _, err := check(Config{Node: node.Config{Config: member.Config{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:7001", 2: "10.0.0.2:7001"}}}, Listen: "127.0.0.1:8001", HTTP: "localhost:9001"}); err != nil {
		t.Fatalf("loopback-only member: %v", err)
	}
	if logs.Len() != 0 {
		t.Errorf("a loopback-only member logged %q", logs.String())
	}

	// Certificates: they must be all three, and this member's.
	certs := t.TempDir()
	if _, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: certs, Members: 2}); err != nil {
		t.Fatal(err)
	}
	c := Config{Node: node.Config{Config: member.Config{ID: 1, Peers: map[uint64]string{1: "10.0.0.1:7001"}}}, Listen: "0.0.0.0:8001", TLS: tlsconfig.Files{Cert: filepath.Join(certs, "member-1.pem")}}
	if _, err := check(c); err == nil {
		t.Error("--cert without --key and --ca was accepted")
	}
	c.TLS.Key, c.TLS.CA = filepath.Join(certs, "member-1-key.pem"), filepath.Join(certs, "ca.pem")
	if _, err := check(c); err != nil {
		t.Errorf("member 1 with its certificate: %v", err)
	}
	c2 := c
	c2.Node = node.Config{Config: member.Config{ID: 2, Peers: map[uint64]string{2: "10.0.0.1:7001"}}}
	if _, err := check(c2); err == nil || !strings.Contains(err.Error(), "member 1's certificate") {
		t.Errorf("member 2 with member 1's certificate: %v", err)
	}
	// A bad ACL file refuses the start.
	bad := filepath.Join(certs, "acl.json")
	os.WriteFile(bad, []byte(`{"rules":[{"identity":"x","prefixes":[""],"rights":["fly"]}]}`), 0o644)
	c.ACL = bad
	if _, err := check(c); err == nil {
		t.Error("a bad ACL file was accepted")
	}
}

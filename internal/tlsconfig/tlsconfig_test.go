package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/watchnet"
)

func parse(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemBytes)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A member certificate is bound to its id by its URI SAN, and allows
// server authentication; a client certificate names no member, whatever
// its common name.
func TestMemberIDBinding(t *testing.T) {
	ca, _, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ca.Member(7, []string{"10.0.0.7", "db7.example"})
	if err != nil {
		t.Fatal(err)
	}
	mc := parse(t, m.CertPEM)
	if id, err := MemberID(mc); err != nil || id != 7 {
		t.Fatalf("member certificate: id %d, %v; want 7", id, err)
	}
	if Identity(mc) != "member-7" {
		t.Fatalf("member certificate's identity %q, want member-7", Identity(mc))
	}
	if err := mc.VerifyHostname("db7.example"); err != nil {
		t.Errorf("--hosts name missing: %v", err)
	}
	if err := mc.VerifyHostname("10.0.0.7"); err != nil {
		t.Errorf("--hosts IP missing: %v", err)
	}
	c, err := ca.Client("batch")
	if err != nil {
		t.Fatal(err)
	}
	cc := parse(t, c.CertPEM)
	if id, err := MemberID(cc); err == nil {
		t.Fatalf("client certificate bound to member %d", id)
	}
	if Identity(cc) != "batch" {
		t.Fatalf("identity %q, want batch", Identity(cc))
	}
	if id, err := MemberID(&x509.Certificate{}); err == nil {
		t.Fatalf("empty certificate bound to %d", id)
	}
	// A common name binds nothing, with or without server authentication.
	cn := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	cn.Subject.CommonName = "member-3"
	if id, err := MemberID(cn); err == nil || !strings.Contains(err.Error(), "no URI SAN") {
		t.Fatalf("common name member-3 without a member URI: %d, %v; want no member", id, err)
	}
	if got := Identity(cn); got != "" {
		t.Fatalf("common name member-3 without a member URI has identity %q, want none", got)
	}
	// The URI binds; the identity follows it, not the common name.
	u, _ := url.Parse(MemberURI(4))
	cn.URIs = []*url.URL{u}
	if id, err := MemberID(cn); err != nil || id != 4 {
		t.Fatalf("URI member 4 over common name member-3: %d, %v", id, err)
	}
	if got := Identity(cn); got != "member-4" {
		t.Fatalf("URI member 4: identity %q, want member-4", got)
	}
	// The member URI on a certificate for client authentication only.
	clientOnly := &x509.Certificate{URIs: cn.URIs, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	clientOnly.Subject.CommonName = "member-4"
	if _, err := MemberID(clientOnly); err == nil || !strings.Contains(err.Error(), "server authentication") {
		t.Fatalf("member URI without server authentication: %v; want no member", err)
	}
	if got := Identity(clientOnly); got != "" {
		t.Fatalf("member URI without server authentication has identity %q, want none", got)
	}
	u2, _ := url.Parse(MemberURI(5))
	cn.URIs = append(cn.URIs, u2)
	if _, err := MemberID(cn); err == nil {
		t.Fatal("a certificate naming members 4 and 5 was accepted")
	}
}

// A client certificate that calls itself member-N (common name only, or
// the member URI without server authentication) is refused at the
// handshake on every port: the client ports would otherwise know it as
// member-N, the peer port as a member. A real member certificate and an
// ordinary client certificate pass where they belong.
func TestMemberLikeClientCertificatesRefusedAtHandshake(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(InitOptions{Dir: dir, Members: 2, Clients: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	loadPair := func(name string) *Reloader {
		t.Helper()
		r, err := Load(Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: caFile})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ca, err := LoadCA(caFile, filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	// What a CA operator could issue by hand, or certs init before it
	// refused member-like client names.
	u, _ := url.Parse(MemberURI(2))
	forged := map[string]*x509.Certificate{
		"client-member-9": {Subject: pkix.Name{CommonName: "member-9"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		"client-uri-2":    {Subject: pkix.Name{CommonName: "member-2"}, URIs: []*url.URL{u}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	}
	for name, tmpl := range forged {
		out, err := ca.issue(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name+".pem"), out.CertPEM, 0o644)
		os.WriteFile(filepath.Join(dir, name+"-key.pem"), out.KeyPEM, 0o600)
	}
	srv := loadPair("member-1")
	serve := func(cfg *tls.Config) string {
		return watchnet.Accept(t, func(c net.Conn) {
			go func() {
				tc := tls.Server(c, cfg)
				if tc.Handshake() == nil {
					tc.Write([]byte("x"))
				}
				tc.Close()
			}()
		})
	}
	clientPort, peerPort := serve(srv.ServerConfig()), serve(srv.PeerServerConfig())
	// dial reports whether name's certificate got an answer from addr.
	dial := func(addr, name string) error {
		cfg := loadPair(name).ClientConfig()
		cfg.ServerName = "127.0.0.1"
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1)) // TLS 1.3: the server's refusal arrives as an alert on the first read
		return err
	}
	for _, tc := range []struct {
		name             string
		client, peerPort bool // accepted there
	}{
		{"member-2", true, true},
		{"client-admin", true, false},
		{"client-member-9", false, false},
		{"client-uri-2", false, false},
	} {
		if err := dial(clientPort, tc.name); (err == nil) != tc.client {
			t.Errorf("%s on a client port: %v; want accepted %v", tc.name, err, tc.client)
		}
		if err := dial(peerPort, tc.name); (err == nil) != tc.peerPort {
			t.Errorf("%s on the peer port: %v; want accepted %v", tc.name, err, tc.peerPort)
		}
	}
}

func TestInitWritesFilesAndRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	files, err := Init(InitOptions{Dir: dir, Members: 2, Clients: []string{"admin", "batch"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ca.pem", "ca-key.pem", "member-1.pem", "member-1-key.pem", "member-2.pem", "member-2-key.pem",
		"client-admin.pem", "client-admin-key.pem", "client-batch.pem", "client-batch-key.pem"}
	if len(files) != len(want) {
		t.Fatalf("wrote %v, want %v", files, want)
	}
	for i, w := range want {
		if files[i] != filepath.Join(dir, w) {
			t.Fatalf("file %d: %s, want %s", i, files[i], w)
		}
		st, err := os.Stat(files[i])
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(w, "-key.pem") && st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", w, st.Mode().Perm())
		}
	}
	if _, err := Init(InitOptions{Dir: t.TempDir(), Members: 1, Clients: []string{"member-9"}}); err == nil || !strings.Contains(err.Error(), "may not look like member names") {
		t.Fatalf("client member-9: %v, want a refusal", err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if _, err := Init(InitOptions{Dir: dir, Members: 2, Clients: []string{"admin"}}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second init: %v, want a refusal to overwrite", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if string(before) != string(after) {
		t.Fatal("a refused init changed ca.pem")
	}
	if _, err := Init(InitOptions{Dir: dir, Members: 2, Clients: []string{"admin"}, Force: true}); err != nil {
		t.Fatalf("init --force: %v", err)
	}
	// What was issued verifies against the CA it was issued with, for a
	// member and a client.
	r, err := Load(Files{Cert: filepath.Join(dir, "member-1.pem"), Key: filepath.Join(dir, "member-1-key.pem"), CA: filepath.Join(dir, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := MemberID(r.Leaf()); err != nil || id != 1 {
		t.Fatalf("member-1.pem: %d, %v", id, err)
	}
}

// After Reload, new connections get the new certificate; the TLS server
// is never restarted.
func TestReloadServesNewCertificate(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(InitOptions{Dir: dir, Members: 1, Clients: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	files := Files{Cert: filepath.Join(dir, "member-1.pem"), Key: filepath.Join(dir, "member-1-key.pem"), CA: filepath.Join(dir, "ca.pem")}
	srv, err := Load(files)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := Load(Files{Cert: filepath.Join(dir, "client-admin.pem"), Key: filepath.Join(dir, "client-admin-key.pem"), CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	srvCfg := srv.ServerConfig()
	addr := watchnet.Accept(t, func(c net.Conn) {
		go func() {
			tc := tls.Server(c, srvCfg) // what tls.Listen does
			tc.Handshake()
			tc.Write([]byte("x"))
			tc.Close()
		}()
	})
	served := func() *x509.Certificate {
		t.Helper()
		cfg := cli.ClientConfig()
		cfg.ServerName = "127.0.0.1"
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Fatalf("TLS version %x, want 1.3", v)
		}
		return c.ConnectionState().PeerCertificates[0]
	}
	first := served()
	// A new member-1 certificate from the same CA, written over the old.
	ca, err := LoadCA(files.CA, filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	next, err := ca.Member(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Cert, next.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Key, next.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := served(); got.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("the new certificate was served before Reload")
	}
	// A broken file keeps the old material.
	os.WriteFile(files.CA, []byte("garbage"), 0o644)
	if err := srv.Reload(); err == nil {
		t.Fatal("Reload accepted a CA file without a certificate")
	}
	if got := served(); got.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("a failed Reload changed the certificate served")
	}
	os.WriteFile(files.CA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), 0o644)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); got.SerialNumber.Cmp(parse(t, next.CertPEM).SerialNumber) != 0 {
		t.Fatalf("after Reload served serial %v, want the new certificate's", got.SerialNumber)
	}
}

// AddClient and AddMember sign with the existing CA (what they issue
// verifies against it and carries its identity), refuse to overwrite
// unless forced, and leave the CA as it was.
func TestAddSignsWithTheExistingCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(InitOptions{Dir: dir, Members: 1}); err != nil {
		t.Fatal(err)
	}
	caBefore, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if files, err := AddClient(AddOptions{Dir: dir}, "carol"); err != nil || len(files) != 2 {
		t.Fatalf("AddClient: %v, %v", files, err)
	}
	if files, err := AddMember(AddOptions{Dir: dir, Hosts: []string{"10.0.0.4"}}, 4); err != nil || len(files) != 2 {
		t.Fatalf("AddMember: %v, %v", files, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caBefore)
	read := func(name string) *x509.Certificate {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return parse(t, b)
	}
	carol, m4 := read("client-carol.pem"), read("member-4.pem")
	if _, err := carol.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client-carol.pem does not verify against the existing CA: %v", err)
	}
	if Identity(carol) != "carol" {
		t.Errorf("client-carol.pem's identity is %q", Identity(carol))
	}
	if id, err := MemberID(m4); err != nil || id != 4 {
		t.Errorf("member-4.pem: member %d, %v", id, err)
	}
	if _, err := m4.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.0.0.4", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("member-4.pem does not verify for 10.0.0.4: %v", err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "client-carol-key.pem")); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("client-carol-key.pem's mode: %v", st)
	}

	keyBefore, _ := os.ReadFile(filepath.Join(dir, "client-carol-key.pem"))
	if _, err := AddClient(AddOptions{Dir: dir}, "carol"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("AddClient over an existing client: %v, want a refusal", err)
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(dir, "client-carol-key.pem")); string(keyAfter) != string(keyBefore) {
		t.Error("a refused AddClient changed the client's key")
	}
	if _, err := AddClient(AddOptions{Dir: dir, Force: true}, "carol"); err != nil {
		t.Errorf("AddClient with Force: %v", err)
	}
	for _, name := range []string{"member-2", "../x", ""} {
		if _, err := AddClient(AddOptions{Dir: dir}, name); err == nil {
			t.Errorf("AddClient %q: no refusal", name)
		}
	}
	if _, err := AddClient(AddOptions{Dir: t.TempDir()}, "dave"); err == nil || !strings.Contains(err.Error(), "load CA") {
		t.Errorf("AddClient without a CA: %v", err)
	}
	if caAfter, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(caAfter) != string(caBefore) {
		t.Error("adding certificates changed ca.pem")
	}
}

package nodetest

import (
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	membercore "github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/server"
)

// TLSMember is a one-member cluster under TLS with an ACL, serving the
// API port (HTTP/JSON and gRPC) and the HTTP port, for the tests of the
// API's identities: API and HTTP are their addresses.
type TLSMember struct {
	API     string
	HTTP    string
	Client  string // the client port's address
	certs   string
	clients []string
	aclFile string
	mb      *embed.Member
}

// StartTLSMember starts the member with certificates for clients (at
// least one) and the ACL acl (its JSON), closed when t ends.
func StartTLSMember(t testing.TB, acl string, clients ...string) *TLSMember {
	t.Helper()
	return StartTLSMemberWith(t, acl, server.Limits{}, clients...)
}

// StartTLSMemberWith is StartTLSMember with the member's limits lim.
func StartTLSMemberWith(t testing.TB, acl string, lim server.Limits, clients ...string) *TLSMember {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if _, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: certs, Members: 1, Clients: clients}); err != nil {
		t.Fatal(err)
	}
	aclFile := filepath.Join(dir, "acl.json")
	if err := os.WriteFile(aclFile, []byte(acl), 0o644); err != nil {
		t.Fatal(err)
	}
	a := freeport.ForIDs(t, 1, 2, 3, 4)
	mb, err := embed.Start(embed.Config{
		Node:   node.Config{Config: membercore.Config{ID: 1, Peers: map[uint64]string{1: a[1]}}, DataDir: filepath.Join(dir, "data")},
		Listen: a[2], API: a[3], HTTP: a[4],
		TLS:    tlsconfig.Files{Cert: filepath.Join(certs, "member-1.pem"), Key: filepath.Join(certs, "member-1-key.pem"), CA: filepath.Join(certs, "ca.pem")},
		ACL:    aclFile,
		Limits: lim,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mb.Close)
	return &TLSMember{API: a[3], HTTP: a[4], Client: a[2], certs: certs, clients: clients, aclFile: aclFile, mb: mb}
}

// SetACL puts acl (its JSON) in force as a SIGHUP does: the file
// rewritten, then reloaded.
func (m *TLSMember) SetACL(t testing.TB, acl string) {
	t.Helper()
	if err := os.WriteFile(m.aclFile, []byte(acl), 0o644); err != nil {
		t.Fatal(err)
	}
	m.mb.Reload()
}

// Node is the member's node.
func (m *TLSMember) Node() *node.Node { return m.mb.Node() }

// ClientTLS is the TLS configuration of client name (its certificate,
// the cluster's CA); "" is one that trusts the CA but presents no
// certificate.
func (m *TLSMember) ClientTLS(t testing.TB, name string) *tls.Config {
	t.Helper()
	cert := name
	if cert == "" {
		cert = m.clients[0]
	}
	files := tlsconfig.Files{CA: filepath.Join(m.certs, "ca.pem"), Cert: filepath.Join(m.certs, "client-"+cert+".pem"), Key: filepath.Join(m.certs, "client-"+cert+"-key.pem")}
	tc, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if name == "" {
		tc.Certificates, tc.GetClientCertificate = nil, nil
	}
	return tc
}

// CertsDir is the directory of the member's CA, certificates and keys.
func (m *TLSMember) CertsDir() string { return m.certs }

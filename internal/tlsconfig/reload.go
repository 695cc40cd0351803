package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
)

// Files names a certificate, its key and the CA that signs every
// certificate of the cluster (members' and clients').
type Files struct {
	Cert, Key, CA string
}

// Set reports whether any of the three is given.
func (f Files) Set() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Check says what is missing when only some of the three are given.
func (f Files) Check() error {
	if !f.Set() {
		return nil
	}
	var missing []string
	for _, m := range []struct{ name, v string }{{"--cert", f.Cert}, {"--key", f.Key}, {"--ca", f.CA}} {
		if m.v == "" {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("TLS needs --cert, --key and --ca together; missing %v", missing)
	}
	return nil
}

// material is one consistent reading of the files.
type material struct {
	cert *tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool
}

// Reloader holds the certificate, key and CA read from Files, swapped
// atomically by Reload: connections made after a reload use the new
// material, connections already open keep theirs.
type Reloader struct {
	files Files
	cur   atomic.Pointer[material]
}

// Load reads f once; a Reloader is never empty.
func Load(f Files) (*Reloader, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	if !f.Set() {
		return nil, errors.New("no certificate files given")
	}
	r := &Reloader{files: f}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload re-reads the files. On error the previous material stays in use.
func (r *Reloader) Reload() error {
	m, err := read(r.files)
	if err != nil {
		return err
	}
	r.cur.Store(m)
	return nil
}

// Leaf is the certificate currently served.
func (r *Reloader) Leaf() *x509.Certificate { return r.cur.Load().leaf }

func read(f Files) (*material, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("load certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse certificate %s: %w", f.Cert, err)
	}
	cert.Leaf = leaf
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", f.CA)
	}
	return &material{cert: &cert, leaf: leaf, pool: pool}, nil
}

// ServerConfig is the configuration of a member's client ports (client,
// HTTP, API): TLS 1.3, the current certificate, and a client certificate
// signed by the current CA required of everyone. A certificate whose
// common name looks like a member's (member-N) but which is no member
// certificate is refused at the handshake, so no client can take a
// member's identity. nextProtos are the application protocols it offers
// in ALPN (the API port's "h2" and "http/1.1"), none for the others.
func (r *Reloader) ServerConfig(nextProtos ...string) *tls.Config {
	return r.serverConfig(checkClientName, nextProtos)
}

// PeerServerConfig is the configuration of a member's peer port: as
// ServerConfig, but only a member certificate (MemberID: the member URI
// SAN and server authentication) gets past the handshake. Which member
// the certificate is bound to is the transport's to check against the
// hello.
func (r *Reloader) PeerServerConfig() *tls.Config {
	return r.serverConfig(func(leaf *x509.Certificate) error {
		if _, err := MemberID(leaf); err != nil {
			return fmt.Errorf("peer port: %w", err)
		}
		return nil
	}, nil)
}

// serverConfig is a listening port's configuration, with check run on
// the verified client certificate.
func (r *Reloader) serverConfig(check func(*x509.Certificate) error, nextProtos []string) *tls.Config {
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		return check(cs.PeerCertificates[0])
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.cur.Load()
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				Certificates:     []tls.Certificate{*m.cert},
				ClientAuth:       tls.RequireAndVerifyClientCert,
				ClientCAs:        m.pool,
				NextProtos:       nextProtos,
				VerifyConnection: verify,
			}, nil
		},
	}
}

// PeerClientConfig is the configuration a member dials peer id with: the
// peer's certificate must chain to the current CA, allow server
// authentication and be bound to id by its member URI (MemberID; its host
// name is not checked: the member id is what a peer is).
func (r *Reloader) PeerClientConfig(id uint64) *tls.Config {
	m := r.cur.Load()
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{*m.cert},
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer sent no certificate")
			}
			if err := verifyChain(cs.PeerCertificates, m.pool, x509.ExtKeyUsageServerAuth); err != nil {
				return err
			}
			got, err := MemberID(cs.PeerCertificates[0])
			if err != nil {
				return err
			}
			if got != id {
				return fmt.Errorf("peer address of member %d presents the certificate of member %d", id, got)
			}
			return nil
		},
	}
}

// ClientConfig is a client's configuration: its certificate, and members'
// certificates verified against the current CA and the dialled host name.
func (r *Reloader) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.cur.Load().cert, nil
		},
		RootCAs: r.cur.Load().pool,
	}
}

func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// IsLoopback reports whether a listen or advertised address reaches only
// this host: localhost or a loopback IP. An empty host (":8001") or
// 0.0.0.0 listens on every interface and is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

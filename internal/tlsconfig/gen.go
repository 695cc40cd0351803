package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// Validity of generated certificates.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 2 * 365 * 24 * time.Hour
)

// CA is a certificate authority able to sign members' and clients'
// certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Issued is one PEM certificate and its PEM key.
type Issued struct {
	CertPEM, KeyPEM []byte
}

// NewCA creates a self-signed CA named name.
func NewCA(name string) (*CA, Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, Issued{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, Issued{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, Issued{}, err
	}
	out, err := encode(der, key)
	return &CA{Cert: cert, Key: key}, out, err
}

// Member issues member id's certificate, usable to serve and to dial,
// valid for localhost, 127.0.0.1 and hosts (names or IPs).
func (ca *CA) Member(id uint64, hosts []string) (Issued, error) {
	u, err := url.Parse(MemberURI(id))
	if err != nil {
		return Issued{}, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: MemberCommonName(id)},
		URIs:        []*url.URL{u},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range append([]string{"localhost", "127.0.0.1"}, hosts...) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl)
}

// Client issues a client certificate whose identity is name.
func (ca *CA) Client(name string) (Issued, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) issue(tmpl *x509.Certificate) (Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(leafValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Issued{}, err
	}
	return encode(der, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}

func encode(der []byte, key *ecdsa.PrivateKey) (Issued, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Issued{}, err
	}
	return Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
	}, nil
}

// validClientName keeps client names usable as file names.
var validClientName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// InitOptions are `raftlock certs init`'s settings.
type InitOptions struct {
	Dir     string
	Members int
	Hosts   []string
	Clients []string
	Force   bool // overwrite existing files
}

// MaxMembers bounds InitOptions.Members.
const MaxMembers = 1000

// Init writes a CA, one certificate per member and one per client into
// Dir: ca.pem, ca-key.pem, member-N.pem, member-N-key.pem, client-NAME.pem,
// client-NAME-key.pem (keys mode 0600). It refuses to overwrite any
// existing file unless Force, checking all of them before writing any. It
// returns the files written.
func Init(o InitOptions) ([]string, error) {
	if o.Members < 1 || o.Members > MaxMembers {
		return nil, fmt.Errorf("--members must be 1..%d, got %d", MaxMembers, o.Members)
	}
	seen := map[string]bool{}
	for _, c := range o.Clients {
		if !validClientName.MatchString(c) {
			return nil, fmt.Errorf("bad client name %q: want letters, digits, '.', '_' or '-'", c)
		}
		if LooksLikeMember(c) {
			return nil, fmt.Errorf("bad client name %q: client names may not look like member names (member-N)", c)
		}
		if seen[c] {
			return nil, fmt.Errorf("client %q listed twice", c)
		}
		seen[c] = true
	}
	type file struct {
		name string
		data []byte
		mode os.FileMode
	}
	var names []string
	names = append(names, "ca.pem", "ca-key.pem")
	for i := 1; i <= o.Members; i++ {
		names = append(names, fmt.Sprintf("member-%d.pem", i), fmt.Sprintf("member-%d-key.pem", i))
	}
	for _, c := range o.Clients {
		names = append(names, "client-"+c+".pem", "client-"+c+"-key.pem")
	}
	if !o.Force {
		for _, n := range names {
			p := filepath.Join(o.Dir, n)
			if _, err := os.Lstat(p); err == nil {
				return nil, fmt.Errorf("%s already exists; remove it or pass --force to overwrite", p)
			} else if !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	ca, caOut, err := NewCA("raftlock CA")
	if err != nil {
		return nil, err
	}
	files := []file{{"ca.pem", caOut.CertPEM, 0o644}, {"ca-key.pem", caOut.KeyPEM, 0o600}}
	for i := 1; i <= o.Members; i++ {
		out, err := ca.Member(uint64(i), o.Hosts)
		if err != nil {
			return nil, err
		}
		base := "member-" + strconv.Itoa(i)
		files = append(files, file{base + ".pem", out.CertPEM, 0o644}, file{base + "-key.pem", out.KeyPEM, 0o600})
	}
	for _, c := range o.Clients {
		out, err := ca.Client(c)
		if err != nil {
			return nil, err
		}
		files = append(files, file{"client-" + c + ".pem", out.CertPEM, 0o644}, file{"client-" + c + "-key.pem", out.KeyPEM, 0o600})
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, f := range files {
		p := filepath.Join(o.Dir, f.name)
		if err := writeFile(p, f.data, f.mode); err != nil {
			return written, err
		}
		written = append(written, p)
	}
	return written, nil
}

// AddOptions are `raftlock certs add-client` and `add-member`'s settings:
// Dir holds the CA (ca.pem, ca-key.pem) that signs, and receives the new
// certificate and key.
type AddOptions struct {
	Dir   string
	Hosts []string // add-member: names or IPs besides localhost and 127.0.0.1
	Force bool     // overwrite the certificate and key if they exist
}

// AddClient signs a certificate for the client name with the CA in o.Dir
// (an existing cluster's), writing client-NAME.pem and client-NAME-key.pem
// beside it: a running cluster accepts it at once, as it trusts the CA,
// not a list of certificates. It returns the files written.
func AddClient(o AddOptions, name string) ([]string, error) {
	if !validClientName.MatchString(name) {
		return nil, fmt.Errorf("bad client name %q: want letters, digits, '.', '_' or '-'", name)
	}
	if LooksLikeMember(name) {
		return nil, fmt.Errorf("bad client name %q: client names may not look like member names (member-N)", name)
	}
	return addIssued(o, "client-"+name, func(ca *CA) (Issued, error) { return ca.Client(name) })
}

// AddMember signs member id's certificate with the CA in o.Dir, writing
// member-N.pem and member-N-key.pem beside it (a member added with
// `raftlock member add`). It returns the files written.
func AddMember(o AddOptions, id uint64) ([]string, error) {
	if id < 1 || id > MaxMembers {
		return nil, fmt.Errorf("member id must be 1..%d, got %d", MaxMembers, id)
	}
	return addIssued(o, "member-"+strconv.FormatUint(id, 10), func(ca *CA) (Issued, error) { return ca.Member(id, o.Hosts) })
}

// addIssued loads the CA in o.Dir, refuses to overwrite base.pem or
// base-key.pem unless o.Force, and writes what issue signs.
func addIssued(o AddOptions, base string, issue func(*CA) (Issued, error)) ([]string, error) {
	cert, key := filepath.Join(o.Dir, base+".pem"), filepath.Join(o.Dir, base+"-key.pem")
	if !o.Force {
		for _, p := range []string{cert, key} {
			if _, err := os.Lstat(p); err == nil {
				return nil, fmt.Errorf("%s already exists; remove it or pass --force to overwrite", p)
			} else if !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	ca, err := LoadCA(filepath.Join(o.Dir, "ca.pem"), filepath.Join(o.Dir, "ca-key.pem"))
	if err != nil {
		return nil, err
	}
	out, err := issue(ca)
	if err != nil {
		return nil, err
	}
	// The key first: a certificate on disk without its key is of no use,
	// a key without its certificate is simply issued again.
	if err := writeFile(key, out.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFile(cert, out.CertPEM, 0o644); err != nil {
		return []string{key}, err
	}
	return []string{cert, key}, nil
}

// writeFile writes data to a temporary file with mode and renames it into
// place, so a key is never readable by others, even briefly.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// LoadCA reads a CA certificate and its key (ca.pem and ca-key.pem), to
// issue more certificates.
func LoadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("%s is not an ECDSA CA", certFile)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Package tlsconfig is raftlock's TLS: certificates read from files and
// re-read on demand (SIGHUP) so they rotate without a restart, the mutual
// TLS configurations of members and clients (TLS 1.3 only), the member id
// bound in a member certificate, and the generation of a small PKI for
// `raftlock certs init`.
//
// A member certificate names its member id twice, as a URI SAN
// raftlock://member/N and as the common name member-N; the URI wins when
// both are present. A client's identity is its certificate's common name.
package tlsconfig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// memberURIPrefix is the URI SAN a member certificate carries, followed by
// the member id.
const memberURIPrefix = "raftlock://member/"

// MemberURI is the URI SAN naming member id.
func MemberURI(id uint64) string { return memberURIPrefix + strconv.FormatUint(id, 10) }

// MemberCommonName is the common name of member id's certificate.
func MemberCommonName(id uint64) string { return "member-" + strconv.FormatUint(id, 10) }

// MemberID returns the member id a certificate is bound to: its URI SAN
// raftlock://member/N, else its common name member-N. A certificate naming
// no member (a client's) or two different ids is an error.
func MemberID(cert *x509.Certificate) (uint64, error) {
	if cert == nil {
		return 0, errors.New("no certificate")
	}
	var id uint64
	for _, u := range cert.URIs {
		s, ok := strings.CutPrefix(u.String(), memberURIPrefix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("certificate %q has a bad member URI %q", cert.Subject.CommonName, u.String())
		}
		if id != 0 && id != n {
			return 0, fmt.Errorf("certificate %q names members %d and %d", cert.Subject.CommonName, id, n)
		}
		id = n
	}
	if id != 0 {
		return id, nil
	}
	if s, ok := strings.CutPrefix(cert.Subject.CommonName, "member-"); ok {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && n > 0 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("certificate %q names no member (want URI %sN or common name member-N)", cert.Subject.CommonName, memberURIPrefix)
}

// Identity is a client's identity: its certificate's common name.
func Identity(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	return cert.Subject.CommonName
}

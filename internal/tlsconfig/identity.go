// Package tlsconfig is raftlock's TLS: certificates read from files and
// re-read on demand (SIGHUP) so they rotate without a restart, the mutual
// TLS configurations of members and clients (TLS 1.3 only), the member id
// bound in a member certificate, and the generation of a small PKI for
// `raftlock certs init`.
//
// A member certificate is one with the URI SAN raftlock://member/N and the
// extended key usage server authentication (besides client
// authentication, to dial its peers); its common name member-N is for
// people only. A client's identity is its certificate's common name, which
// may not look like a member's (member-N): a client certificate (client
// authentication only) could otherwise pass for a member wherever a name
// is all that is compared.
package tlsconfig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// memberURIPrefix is the URI SAN a member certificate carries, followed by
// the member id.
const memberURIPrefix = "raftlock://member/"

// MemberURI is the URI SAN naming member id.
func MemberURI(id uint64) string { return memberURIPrefix + strconv.FormatUint(id, 10) }

// MemberCommonName is the common name of member id's certificate, and the
// identity a member certificate has on the client ports.
func MemberCommonName(id uint64) string { return "member-" + strconv.FormatUint(id, 10) }

// LooksLikeMember says whether name has the form of a member's identity,
// member-N, which no client may take.
func LooksLikeMember(name string) bool {
	s, ok := strings.CutPrefix(name, "member-")
	if !ok {
		return false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return err == nil && n > 0
}

// MemberID returns the member id a member certificate is bound to: its URI
// SAN raftlock://member/N. The certificate must also allow server
// authentication, which a member certificate does (it serves the peer
// port) and a client certificate does not. A common name member-N binds
// nothing: anyone who may get a client certificate may pick that name.
// A certificate naming no member, two different ids, or without server
// authentication is an error.
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
	if id == 0 {
		return 0, fmt.Errorf("certificate %q is no member's: it has no URI SAN %sN (a common name binds no member)", cert.Subject.CommonName, memberURIPrefix)
	}
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return 0, fmt.Errorf("certificate %q names member %d but does not allow server authentication, which every member certificate does", cert.Subject.CommonName, id)
	}
	return id, nil
}

// Identity is the identity a certificate has on the client ports: member-N
// for member N's certificate (MemberID), else the common name. A
// certificate whose common name looks like a member's but which is no
// member certificate has none (""): it can never pass for a member (the
// servers' configurations refuse it at the handshake already,
// checkClientName).
func Identity(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	if id, err := MemberID(cert); err == nil {
		return MemberCommonName(id)
	}
	if LooksLikeMember(cert.Subject.CommonName) {
		return ""
	}
	return cert.Subject.CommonName
}

// checkClientName refuses a certificate with no common name, and one
// whose common name looks like a member's when it is not a member
// certificate.
func checkClientName(cert *x509.Certificate) error {
	if cert.Subject.CommonName == "" {
		// The identity is the common name: without one, a client would
		// be "", which is no one's name in an ACL and the anonymous
		// party of a member without TLS, whom no per-identity share
		// limits.
		return fmt.Errorf("certificate refused: it has no common name, which is a client's identity")
	}
	if !LooksLikeMember(cert.Subject.CommonName) {
		return nil
	}
	if _, err := MemberID(cert); err != nil {
		return fmt.Errorf("certificate %q refused: its common name is a member's, but it is no member certificate (%w)", cert.Subject.CommonName, err)
	}
	return nil
}

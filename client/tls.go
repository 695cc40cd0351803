package client

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/raftlock/raftlock/client/wire"
)

// wrapTLS makes nc a TLS client connection when Options.TLS is set; the
// handshake happens with the greeting, within its deadline.
func (c *Client) wrapTLS(nc net.Conn, addr string) net.Conn {
	if c.opts.TLS == nil {
		return nc
	}
	cfg := c.opts.TLS.Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return tls.Client(nc, cfg)
}

// isTLSError reports a TLS failure no retry can cure: a certificate one
// side does not trust, a missing client certificate, or a peer that does
// not speak TLS.
func isTLSError(err error) bool {
	var alert tls.AlertError
	var remote *net.OpError // a TLS alert from the member arrives as "remote error"
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &alert) || (errors.As(err, &remote) && remote.Op == "remote error") || errors.As(err, &verify) || errors.As(err, &header) ||
		errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.Is(err, errTLSRequired)
}

// errTLSRequired: a member answered the greeting with a TLS alert: it
// serves TLS only and this client has no TLS configuration.
var errTLSRequired = errors.New("the member requires TLS: give a client certificate, its key and the cluster's CA (--cert, --key, --ca)")

// checkGreeting is wire.CheckGreeting that also recognises a member
// answering wire.TLSRequired.
func checkGreeting(r io.Reader) error {
	var seen bytes.Buffer
	err := wire.CheckGreeting(io.TeeReader(r, &seen))
	if errors.Is(err, wire.ErrVersion) && strings.HasPrefix(wire.TLSRequired, seen.String()) {
		return errTLSRequired
	}
	return err
}

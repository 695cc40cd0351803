package peer

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/raftlock/raftlock/internal/tlsconfig"
)

// handshake completes an inbound TLS handshake (within the connection's
// hello deadline, pending.go); plain TCP has none.
func (t *TCP) handshake(c net.Conn) error {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil
	}
	if err := tc.HandshakeContext(t.ctx); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	return nil
}

// checkSender refuses a hello whose sender is not the member the stream's
// certificate is bound to. Without TLS anyone may claim any id.
func (t *TCP) checkSender(c net.Conn, from uint64) error {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil
	}
	cs := tc.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("hello from member %d without a certificate", from)
	}
	id, err := tlsconfig.MemberID(cs.PeerCertificates[0])
	if err != nil {
		return fmt.Errorf("hello claiming member %d refused: %w", from, err)
	}
	if id != from {
		return fmt.Errorf("hello claiming member %d refused: the certificate is member %d's", from, id)
	}
	return nil
}

// dial opens the stream to peer id: TCP, then, with TLS, a handshake that
// checks the peer is member id.
func (t *TCP) dial(ctx context.Context, id uint64, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || t.tls == nil {
		return c, err
	}
	tc := tls.Client(c, t.tls.PeerClientConfig(id))
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake with member %d at %s: %w", id, addr, err)
	}
	return tc, nil
}

package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

const (
	// DefaultReadTimeout bounds the wait for the next bytes of an inbound
	// peer stream when Config.ReadTimeout is zero: ten election
	// timeouts at the default tick.
	DefaultReadTimeout = 2 * time.Second
	// frameChunk is the most a frame read allocates ahead of the bytes
	// that arrived: a length that lies costs at most this much.
	frameChunk = 256 << 10
)

// limits bound the inbound side of a TCP transport (pending.go).
type limits struct {
	readTimeout         time.Duration
	helloTimeout        time.Duration
	maxStreamsPerMember int
}

func newLimits() limits {
	return limits{readTimeout: DefaultReadTimeout, helloTimeout: DefaultHelloTimeout, maxStreamsPerMember: DefaultMaxStreamsPerMember}
}

// deadlineReader sets a read deadline before every read, so a stream that
// stops mid-frame or between frames ends after the timeout, while a long
// frame that keeps arriving (a snapshot) is never cut. While d is zero (a
// connection before its hello passed) it sets none: the connection's
// absolute hello deadline holds.
type deadlineReader struct {
	c net.Conn
	d time.Duration
}

func (r *deadlineReader) Read(b []byte) (int, error) {
	if r.d > 0 {
		r.c.SetReadDeadline(time.Now().Add(r.d))
	}
	return r.c.Read(b)
}

// readFrame reads one length-prefixed frame. A length over limit fails
// before anything is allocated; the payload is read in chunks and the
// buffer grows as bytes arrive, so a length that lies costs no more than
// one chunk beyond what the peer really sent.
func readFrame(r *bufio.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if int64(n) > int64(limit) {
		return nil, fmt.Errorf("frame of %d bytes exceeds limit %d", n, limit)
	}
	buf := make([]byte, 0, min(n, frameChunk))
	for len(buf) < n {
		k := min(n-len(buf), frameChunk)
		buf = slices.Grow(buf, k)
		if _, err := io.ReadFull(r, buf[len(buf):len(buf)+k]); err != nil {
			return nil, fmt.Errorf("truncated frame: %w", err)
		}
		buf = buf[:len(buf)+k]
	}
	return buf, nil
}

// idle says whether err is the read timeout of a stream that went silent:
// normal for the link between two followers, so not worth a warning.
func idle(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Bounds of lock rule 10 (ARCHITECTURE.md), checked by the client before it
// sends and by the member when it receives.
const (
	MaxKeyLen   = 256
	MaxOwnerLen = 128
	MinLeaseMS  = 10
	MaxLeaseMS  = 3_600_000
)

// ValidateOwner checks an owner's length.
func ValidateOwner(owner string) error {
	if len(owner) > MaxOwnerLen {
		return fmt.Errorf("owner must be at most %d bytes, got %d", MaxOwnerLen, len(owner))
	}
	return nil
}

// ValidateKey checks a lock key's length.
func ValidateKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return fmt.Errorf("key must be 1..%d bytes, got %d", MaxKeyLen, len(key))
	}
	return nil
}

// ValidateLease checks a lease length; the message shows the value given.
func ValidateLease(ms int64) error {
	if ms < MinLeaseMS || ms > MaxLeaseMS {
		return fmt.Errorf("lease must be 10ms..1h, got %v", time.Duration(ms)*time.Millisecond)
	}
	return nil
}

// Greeting opens every client connection, in both directions: the client
// sends it first and the member answers with its own. A member that speaks
// another version answers with its greeting and closes; anything else on
// the port (HTTP, the peer port) answers something that is not a greeting.
// The line ends in a newline so an HTTP server rejects it at once.
const Greeting = "RAFTLOCK/1\n"

// TLSRequired is what a member that serves TLS only writes, in plain text,
// to a client that sent its greeting without TLS. A client of this version
// recognises it; older ones read a version mismatch.
const TLSRequired = "RAFTLOCK/TLS required\n"

// greetingPrefix is what every version's greeting starts with.
const greetingPrefix = "RAFTLOCK/"

// Errors of the greeting that no retry can cure.
var (
	// ErrNotRaftlock: the other end sent something that is not a greeting.
	ErrNotRaftlock = errors.New("not a raftlock client port")
	// ErrVersion: the other end speaks another version of the protocol.
	ErrVersion = errors.New("protocol version mismatch")
)

// CheckGreeting reads the other end's greeting from r (exactly its length,
// nothing more). It returns nil for this version's; an error wrapping
// ErrVersion or ErrNotRaftlock when the bytes show the other end speaks
// another version or another protocol; and a plain error when the stream
// ended or timed out before showing anything wrong (a member stopping or
// paused), which a caller may retry.
func CheckGreeting(r io.Reader) error {
	buf := make([]byte, len(Greeting))
	n, err := io.ReadFull(r, buf)
	got := string(buf[:n])
	switch {
	case got == Greeting:
		return nil
	case strings.HasPrefix(Greeting, got):
		return fmt.Errorf("greeting cut short after %d bytes: %w", n, err)
	case n == len(Greeting) && strings.HasPrefix(got, greetingPrefix):
		return fmt.Errorf("%w: the other end speaks %s, this one %s", ErrVersion,
			strings.TrimSpace(got), strings.TrimSpace(Greeting))
	}
	return ErrNotRaftlock
}

// OversizedFrameError is a request frame over MaxFrame. When Skipped, its
// body was read and discarded, so the stream is still in step and the
// request (ID) can be answered.
type OversizedFrameError struct {
	Size    uint32
	ID      uint64
	Skipped bool
}

func (e *OversizedFrameError) Error() string {
	return fmt.Sprintf("%v: frame of %d bytes exceeds the limit of %d", ErrMalformed, e.Size, MaxFrame)
}

func (e *OversizedFrameError) Unwrap() error { return ErrMalformed }

// maxSkip is the largest oversized frame a reader discards to stay in step;
// beyond it the connection is not worth keeping.
const maxSkip = 1 << 20

// ReadFrame reads one frame body. A length over MaxFrame is an
// *OversizedFrameError before anything is allocated; a frame of up to 1 MiB
// is then skipped, and its request id reported.
func ReadFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < headerLength {
		return nil, fmt.Errorf("%w: frame of %d bytes is shorter than a header", ErrMalformed, n)
	}
	if n > MaxFrame {
		oe := &OversizedFrameError{Size: n}
		if n <= maxSkip {
			var h [headerLength]byte
			if _, err := io.ReadFull(r, h[:]); err != nil {
				return nil, oe
			}
			oe.ID = binary.BigEndian.Uint64(h[1:])
			if _, err := r.Discard(int(n) - headerLength); err == nil {
				oe.Skipped = true
			}
		}
		return nil, oe
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("%w: truncated frame: %v", ErrMalformed, err)
	}
	return body, nil
}

// RequestHeader returns a frame body's opcode and id, if it has a header
// and a request opcode: enough to answer a request whose fields are bad.
func RequestHeader(body []byte) (Op, uint64, bool) {
	_, op, id, err := header(body)
	if err != nil {
		return 0, 0, false
	}
	switch op {
	case OpAcquire, OpRelease, OpRenew, OpGet, OpStatus, OpList, OpWatch:
		return op, id, true
	}
	return 0, 0, false
}

package wire

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/raftlock/raftlock/internal/lockrule"
)

// The lock vocabulary's bounds and checks (package lockrule, their one
// definition), as the client protocol's users name them: the client checks
// them before it sends, the member when it receives.
const (
	MaxKeyLen    = lockrule.MaxKeyLen
	MaxOwnerLen  = lockrule.MaxOwnerLen
	MinLeaseMS   = lockrule.MinLeaseMS
	MaxLeaseMS   = lockrule.MaxLeaseMS
	MaxListLimit = lockrule.MaxListLimit
)

// ErrKeyNotText is lockrule.ErrKeyNotText.
var ErrKeyNotText = lockrule.ErrKeyNotText

// The checks (lockrule's).
var (
	ValidateKey       = lockrule.ValidateKey
	ValidateStoredKey = lockrule.ValidateStoredKey
	ValidateOwner     = lockrule.ValidateOwner
	ValidateLease     = lockrule.ValidateLease
	ValidateLeaseMS   = lockrule.ValidateLeaseMS
	ValidateListLimit = lockrule.ValidateListLimit
)

// AsText is s as UTF-8 text: each byte that is not UTF-8 replaced by
// U+FFFD, as encoding/json writes it. It is how a key or owner stored
// before the key rule is shown where only text can go (a JSON or
// protobuf string, a message); the APIs carry the key itself beside it
// (key_b64, key_bytes).
func AsText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		b = utf8.AppendRune(b, r) // RuneError for a byte that is not UTF-8
		i += n
	}
	return string(b)
}

// KeyB64 is key in standard base64 when it is not UTF-8 (stored before
// the key rule), "" when it is: the key_b64 of the HTTP/JSON API, which
// names a key no JSON string can carry.
func KeyB64(key string) string {
	if utf8.ValidString(key) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(key))
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
	case OpAcquire, OpRelease, OpRenew, OpGet, OpStatus, OpList, OpWatch, OpForward:
		return op, id, true
	}
	return 0, 0, false
}

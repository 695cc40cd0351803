// Package lockrule is the lock vocabulary's bounds and checks, defined
// once below everything that speaks of a lock: the state machine's codec
// (fsm), the member core (member), the client protocol (client/wire) and
// through them every API. Lock rule 10 (ARCHITECTURE.md): a key is
// 1..MaxKeyLen bytes, and a new one UTF-8 text without NUL; an owner at
// most MaxOwnerLen bytes of UTF-8; a lease MinLeaseMS..MaxLeaseMS.
package lockrule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The bounds.
const (
	MaxKeyLen    = 256
	MaxOwnerLen  = 128
	MinLeaseMS   = 10
	MaxLeaseMS   = 3_600_000
	MaxListLimit = 1000 // the most locks a list page asks for (0: 100)
)

// ErrKeyNotText is a new key that breaks the key rule's text part (see
// ValidateKey): every entry refuses such a key with this message.
var ErrKeyNotText = errors.New("key must be valid UTF-8 without NUL")

// ValidateKey checks a new key (an acquire's) against the key rule: a
// lock key is 1..MaxKeyLen bytes of UTF-8 text without NUL. Every API can
// then name it: JSON and protobuf strings must be UTF-8, and a command
// line, an environment variable or a C string cannot hold a NUL. The
// member stores bytes, and versions before the rule stored any, so the
// calls that name a key the cluster may already hold (get, release,
// renew) check only ValidateStoredKey's bound.
func ValidateKey(key string) error {
	if err := ValidateStoredKey(key); err != nil {
		return err
	}
	if !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
		return ErrKeyNotText
	}
	return nil
}

// ValidateStoredKey checks the length of a key that names a lock the
// cluster may hold, one stored before the key rule included.
func ValidateStoredKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return fmt.Errorf("key must be 1..%d bytes, got %d", MaxKeyLen, len(key))
	}
	return nil
}

// ValidateOwner checks an owner: at most MaxOwnerLen bytes of UTF-8, so
// that every API can show it.
func ValidateOwner(owner string) error {
	if len(owner) > MaxOwnerLen {
		return fmt.Errorf("owner must be at most %d bytes, got %d", MaxOwnerLen, len(owner))
	}
	if !utf8.ValidString(owner) {
		return errors.New("owner must be valid UTF-8")
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

// ValidateLeaseMS checks a lease as a request carries it, in
// milliseconds, whatever their number: one too large for a
// time.Duration is shown as the number given, never as what it
// overflows or is clamped to.
func ValidateLeaseMS(ms uint64) error {
	if ms > MaxLeaseMS {
		return fmt.Errorf("lease must be 10ms..1h, got %dms", ms)
	}
	return ValidateLease(int64(ms))
}

// ValidateListLimit checks a list page's limit as a request carries it.
func ValidateListLimit(n uint64) error {
	if n > MaxListLimit {
		return fmt.Errorf("limit must be 1..%d, got %d", MaxListLimit, n)
	}
	return nil
}

// Package snapchain frames a snapshot kept as a chain of parts (a whole
// table, then deltas that each hold what changed since the part before)
// as one stream: the bytes a member restores from and a follower
// receives.
//
// A chain lets a member with a big table store a snapshot that costs what
// changed since its last one, not the whole table: each delta is a file of
// its own, and the stream joins the files without rewriting them.
//
// The layout is Magic, then every part's bytes each followed by its length
// as 8 bytes big-endian. The lengths trail their parts so that a writer
// can hash the stream as it writes a part whose length it does not know
// yet; a reader splits the stream from its end.
package snapchain

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Magic starts every chain. No part format starts with it.
const Magic = "RLCHAIN1"

// TrailerLen is the size of the length that follows each part.
const TrailerLen = 8

// MaxParts bounds the parts Split accepts: far more than a store ever
// keeps, few enough that corrupt input cannot make Split allocate much.
const MaxParts = 1 << 16

// ErrCorrupt reports a stream that is not a well-formed chain.
var ErrCorrupt = errors.New("corrupt snapshot chain")

// Is says whether data is a chain (starts with Magic).
func Is(data []byte) bool { return bytes.HasPrefix(data, []byte(Magic)) }

// Trailer returns the bytes that follow a part of n bytes.
func Trailer(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// Size returns the length of the stream of parts of the given sizes.
func Size(parts ...uint64) uint64 {
	n := uint64(len(Magic))
	for _, p := range parts {
		n += p + TrailerLen
	}
	return n
}

// Join returns the stream of parts: the inverse of Split.
func Join(parts ...[]byte) []byte {
	b := []byte(Magic)
	for _, p := range parts {
		b = append(b, p...)
		b = append(b, Trailer(uint64(len(p)))...)
	}
	return b
}

// Split returns the parts of a chain, first to last, as subslices of data.
// It rejects a stream without Magic, with a length that runs past the
// start, with bytes left over, with no part, or with more than MaxParts.
func Split(data []byte) ([][]byte, error) {
	if !Is(data) {
		return nil, fmt.Errorf("%w: no chain magic", ErrCorrupt)
	}
	var parts [][]byte
	end := len(data)
	for end > len(Magic) {
		if len(parts) == MaxParts {
			return nil, fmt.Errorf("%w: more than %d parts", ErrCorrupt, MaxParts)
		}
		if end-len(Magic) < TrailerLen {
			return nil, fmt.Errorf("%w: %d bytes left before a part's length", ErrCorrupt, end-len(Magic))
		}
		n := binary.BigEndian.Uint64(data[end-TrailerLen : end])
		end -= TrailerLen
		if n > uint64(end-len(Magic)) {
			return nil, fmt.Errorf("%w: part of %d bytes in %d", ErrCorrupt, n, end-len(Magic))
		}
		parts = append(parts, data[end-int(n):end])
		end -= int(n)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no part", ErrCorrupt)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return parts, nil
}

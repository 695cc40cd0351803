// Package binread reads the fields of a binary encoding (the client
// protocol's frames, the state machine's entries and snapshots) with a
// sticky error: after the first failure every read returns a zero value,
// so a decoder checks once, and truncated input never indexes past the
// end of its buffer.
package binread

import (
	"encoding/binary"
	"fmt"
)

// Reader reads from Buf. Err is the first failure, which wraps Malformed,
// the encoding's own sentinel error.
type Reader struct {
	Buf       []byte
	Err       error
	Malformed error
}

// Fail records a failure, unless one was recorded already.
func (r *Reader) Fail(format string, args ...any) {
	if r.Err == nil {
		r.Err = fmt.Errorf("%w: "+format, append([]any{r.Malformed}, args...)...)
	}
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.Err != nil {
		return 0
	}
	if len(r.Buf) < 1 {
		r.Fail("truncated")
		return 0
	}
	b := r.Buf[0]
	r.Buf = r.Buf[1:]
	return b
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.Buf)
	if n <= 0 {
		r.Fail("bad varint")
		return 0
	}
	r.Buf = r.Buf[n:]
	return v
}

// Finish fails on bytes left unread and returns the first failure.
func (r *Reader) Finish() error {
	if r.Err == nil && len(r.Buf) != 0 {
		r.Fail("%d trailing bytes", len(r.Buf))
	}
	return r.Err
}

package binread

import (
	"errors"
	"testing"
)

var errBad = errors.New("bad input")

// The first failure sticks: later reads return zero and do not replace
// it, and it wraps the encoding's sentinel.
func TestFirstFailureSticks(t *testing.T) {
	r := Reader{Buf: []byte{0x05, 0x80}, Malformed: errBad}
	if v := r.Uvarint(); v != 5 || r.Err != nil {
		t.Fatalf("Uvarint = %d, %v", v, r.Err)
	}
	if v := r.Uvarint(); v != 0 || r.Err == nil || r.Err.Error() != "bad input: bad varint" {
		t.Fatalf("Uvarint of a cut varint = %d, %v", v, r.Err)
	}
	first := r.Err
	if b := r.Byte(); b != 0 || r.Err != first {
		t.Fatalf("Byte after a failure = %d, %v", b, r.Err)
	}
	if err := r.Finish(); err != first || !errors.Is(err, errBad) {
		t.Fatalf("Finish = %v, want the first failure", err)
	}
}

// Finish refuses what was left unread; Byte refuses an empty buffer.
func TestFinishAndByte(t *testing.T) {
	r := Reader{Buf: []byte{7, 8}, Malformed: errBad}
	if b := r.Byte(); b != 7 {
		t.Fatalf("Byte = %d", b)
	}
	if err := r.Finish(); err == nil || err.Error() != "bad input: 1 trailing bytes" {
		t.Fatalf("Finish = %v", err)
	}
	r = Reader{Malformed: errBad}
	if r.Byte(); r.Err == nil || r.Err.Error() != "bad input: truncated" {
		t.Fatalf("Byte of nothing: %v", r.Err)
	}
	if err := r.Finish(); err != r.Err {
		t.Fatalf("Finish = %v", err)
	}
}

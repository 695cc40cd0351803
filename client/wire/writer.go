package wire

import (
	"io"
	"sync"
)

// Writer combines frames from many goroutines into few writes: a caller
// that finds the connection idle writes at once, from its own goroutine;
// callers that arrive while a write is in progress append their frames and
// leave, and the writing caller sends them with its next write. So an idle
// connection costs no goroutine handoff, and a busy one still batches.
type Writer struct {
	w io.Writer

	mu       sync.Mutex
	buf      []byte
	spare    []byte
	flushing bool
	err      error
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write appends one or more frames with add and makes sure they are
// written. It returns false if the writer had already failed before the
// frames were queued (so they were certainly not sent).
func (fw *Writer) Write(add func([]byte) []byte) (queued bool, err error) {
	fw.mu.Lock()
	if fw.err != nil {
		err := fw.err
		fw.mu.Unlock()
		return false, err
	}
	fw.buf = add(fw.buf)
	if fw.flushing {
		fw.mu.Unlock()
		return true, nil
	}
	fw.flushing = true
	for len(fw.buf) > 0 && fw.err == nil {
		out := fw.buf
		fw.buf = fw.spare[:0]
		fw.mu.Unlock()
		_, werr := fw.w.Write(out)
		fw.mu.Lock()
		fw.spare = out[:0]
		if werr != nil {
			fw.err = werr
		}
	}
	fw.flushing = false
	err = fw.err
	fw.mu.Unlock()
	return true, err
}

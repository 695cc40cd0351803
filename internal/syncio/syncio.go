// Package syncio serialises writes that several goroutines make to one
// writer: a command's output copies, a member's log in a test.
package syncio

import (
	"bytes"
	"io"
	"sync"
)

// Writer passes each Write to W, one at a time.
type Writer struct {
	mu sync.Mutex
	W  io.Writer
}

// Write writes p to W under the lock.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.W.Write(p)
}

// Buffer is a bytes.Buffer that several goroutines may write to while
// another reads it.
type Buffer struct {
	Writer
	b bytes.Buffer
}

// NewBuffer returns an empty Buffer.
func NewBuffer() *Buffer {
	b := &Buffer{}
	b.W = &b.b
	return b
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

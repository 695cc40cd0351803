package wire

import (
	"io"
	"runtime"
	"sync"
)

// Writer batches frames from many goroutines into few writes: callers
// append to a shared buffer and return; one flusher goroutine per
// connection writes whatever has piled up since its last write. When an
// applied log entry answers thirty requests at once, their answers leave in
// one write instead of thirty (measured: at 256 clients, per-answer writes
// were 37% of the leader's CPU).
type Writer struct {
	w       io.Writer
	onError func(error)

	mu    sync.Mutex
	buf   []byte
	spare []byte
	err   error

	kick chan struct{}
	done chan struct{}
	once sync.Once
}

// NewWriter starts a Writer on w; onError (may be nil) is called once, from
// the flusher, when a write fails.
func NewWriter(w io.Writer, onError func(error)) *Writer {
	fw := &Writer{w: w, onError: onError, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go fw.flushLoop()
	return fw
}

// Write appends frames with add and schedules them. It returns false if the
// writer had already failed or closed, so the frames were certainly not
// sent.
func (fw *Writer) Write(add func([]byte) []byte) (queued bool, err error) {
	fw.mu.Lock()
	if fw.err != nil {
		err := fw.err
		fw.mu.Unlock()
		return false, err
	}
	fw.buf = add(fw.buf)
	fw.mu.Unlock()
	select {
	case fw.kick <- struct{}{}:
	default:
	}
	return true, nil
}

// Buffered is how many bytes wait to be written: a stream that writes
// faster than the connection takes them (a watch) holds back past a bound,
// rather than letting the buffer grow.
func (fw *Writer) Buffered() int {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return len(fw.buf)
}

// Close stops the flusher; frames not yet written are dropped.
func (fw *Writer) Close() {
	fw.once.Do(func() {
		fw.mu.Lock()
		if fw.err == nil {
			fw.err = io.ErrClosedPipe
		}
		fw.mu.Unlock()
		close(fw.done)
	})
}

func (fw *Writer) flushLoop() {
	for {
		select {
		case <-fw.done:
			return
		case <-fw.kick:
		}
		// A woken goroutine runs before the others its waker made runnable;
		// yield once so the rest of a burst (the answers of one applied
		// entry) joins this write instead of each taking its own.
		runtime.Gosched()
		fw.mu.Lock()
		if len(fw.buf) == 0 {
			fw.mu.Unlock()
			continue
		}
		// Swap buffers: callers append to the spare while out is written.
		// (Swapping an empty buffer would leave buf and spare sharing one
		// array, and a later write would race with appends into it.)
		out := fw.buf
		fw.buf = fw.spare[:0]
		fw.mu.Unlock()
		_, err := fw.w.Write(out)
		fw.mu.Lock()
		fw.spare = out[:0]
		if err != nil && fw.err == nil {
			fw.err = err
		}
		fw.mu.Unlock()
		if err != nil {
			if fw.onError != nil {
				fw.onError(err)
			}
			return
		}
	}
}

// Package ending is the end of something that ends once, with a cause: a
// watch's stream, a held lock. The end is a closed channel a select can
// wait on, and the cause is readable once it is closed, never before.
package ending

import "sync"

// An Ending ends once, at the first End; its zero value is not usable
// (New).
type Ending struct {
	done chan struct{}
	once sync.Once
	err  error
}

// New returns an Ending that has not ended.
func New() *Ending { return &Ending{done: make(chan struct{})} }

// End ends e with err, unless it ended already: the first cause is kept.
// The cause is set before Done is closed, so a reader that sees Done
// closed finds it.
func (e *Ending) End(err error) {
	e.once.Do(func() {
		e.err = err
		close(e.done)
	})
}

// Done is closed when e ends.
func (e *Ending) Done() <-chan struct{} { return e.done }

// Err is the cause e ended with, nil before it ends.
func (e *Ending) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return nil
	}
}

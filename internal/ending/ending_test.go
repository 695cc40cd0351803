package ending

import (
	"errors"
	"testing"
)

// The cause is nil until the end, then the first End's, whatever comes
// after.
func TestTheFirstCauseIsKept(t *testing.T) {
	e := New()
	if err := e.Err(); err != nil {
		t.Fatalf("Err before the end: %v", err)
	}
	select {
	case <-e.Done():
		t.Fatal("Done closed before the end")
	default:
	}
	first, second := errors.New("first"), errors.New("second")
	e.End(first)
	e.End(second)
	<-e.Done()
	if err := e.Err(); err != first {
		t.Fatalf("Err = %v, want %v", err, first)
	}
}

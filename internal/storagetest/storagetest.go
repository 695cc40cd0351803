// Package storagetest helps the tests of raft log stores: the node's
// pebble store and the simulator's in-memory one read back alike.
package storagetest

import "testing"

// Log is the part of a raft.Storage the helpers read.
type Log interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
	Term(i uint64) (uint64, error)
}

// Terms returns the term of every entry s holds, first to last; a term s
// cannot read fails t.
func Terms(t testing.TB, s Log) []uint64 {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	var terms []uint64
	for i := first; i <= last; i++ {
		term, err := s.Term(i)
		if err != nil {
			t.Fatalf("term of %d: %v", i, err)
		}
		terms = append(terms, term)
	}
	return terms
}

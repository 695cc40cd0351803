package node

import (
	"testing"
	"time"
)

// Tests that reach into the package's internals without a cluster; the
// cluster tests are in package node_test and run on internal/testcluster.

// The raft loop may call ReportSnapshot (through Send) while reportc is
// full, and it is reportc's only reader: the call must return at once, and
// the report must still arrive.
func TestReportSnapshotNeverBlocksAndIsNotLost(t *testing.T) {
	n := &Node{reportc: make(chan peerReport), stopc: make(chan struct{})}
	defer close(n.stopc)
	returned := make(chan struct{})
	go func() {
		n.ReportSnapshot(2, true)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("ReportSnapshot blocked on a full report channel")
	}
	select {
	case r := <-n.reportc:
		if r.id != 2 || !r.snapshot || !r.failed {
			t.Fatalf("report %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the snapshot report was dropped")
	}
}

// A journal line cut by a kill is dropped on open, so the next
// incarnation's first line is read back.
func TestAuditJournalDropsTornTail(t *testing.T) {
	path := t.TempDir() + "/journal"
	j, err := openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	j.add(journalEntry{Index: 1, Term: 1})
	j.flush()
	j.f.WriteString(`{"index":2,"te`) // torn by a kill
	j.close()
	j, err = openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	j.add(journalEntry{Index: 2, Term: 1})
	j.flush()
	j.close()
	if _, complete, err := readJournal(path, 2); err != nil || !complete {
		t.Fatalf("journal after a torn tail: complete=%v err=%v", complete, err)
	}
}

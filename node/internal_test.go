package node

import (
	"context"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node/logstore"
)

// Tests that reach into the package's internals without a cluster; the
// cluster tests are in package node_test and run on internal/nodetest.

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

// mustOpenJournal opens the audit journal at path or fails t.
func mustOpenJournal(t *testing.T, path string) *journal {
	t.Helper()
	j, err := openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// A journal line cut by a kill is dropped on open, so the next
// incarnation's first line is read back.
func TestAuditJournalDropsTornTail(t *testing.T) {
	path := t.TempDir() + "/journal"
	j := mustOpenJournal(t, path)
	j.add(journalEntry{Index: 1, Term: 1})
	j.flush()
	j.f.WriteString(`{"index":2,"te`) // torn by a kill
	j.close()
	j = mustOpenJournal(t, path)
	j.add(journalEntry{Index: 2, Term: 1})
	j.flush()
	j.close()
	if _, complete, err := readJournal(path, 2); err != nil || !complete {
		t.Fatalf("journal after a torn tail: complete=%v err=%v", complete, err)
	}
}

// A journal write that fails keeps its entries for the next flush: they
// are journalled late, never lost (found in review: the buffer was cleared
// before the error was looked at, and the next snapshot then covered
// entries the journal never had).
func TestAuditJournalKeepsEntriesAFailedWriteDidNotStore(t *testing.T) {
	path := t.TempDir() + "/journal"
	j := mustOpenJournal(t, path)
	j.add(journalEntry{Index: 1, Term: 1})
	if err := j.flush(); err != nil {
		t.Fatal(err)
	}
	good := j.f
	broken, err := os.Open(path) // read only: every write fails
	if err != nil {
		t.Fatal(err)
	}
	defer broken.Close()
	j.f = broken
	j.add(journalEntry{Index: 2, Term: 1})
	if err := j.flush(); err == nil {
		t.Fatal("a write to a read-only file succeeded")
	}
	j.f = good
	j.add(journalEntry{Index: 3, Term: 1})
	if err := j.flush(); err != nil {
		t.Fatal(err)
	}
	if err := j.sync(); err != nil {
		t.Fatal(err)
	}
	j.close()
	if _, complete, err := readJournal(path, 3); err != nil || !complete {
		t.Fatalf("journal after a failed write: complete=%v err=%v, want entries 1 to 3", complete, err)
	}
}

// An answer that finds its caller gone is a grant nobody will use when it
// carries a token: the driver releases it (rule 7). With --no-batch a
// grant's answer waits for the loop's next input after the grant applied,
// so a caller could leave in between; the lock stayed held by nobody for its
// whole lease (found in review).
func TestAnswerWithoutItsCallerReleasesTheGrant(t *testing.T) {
	n := StartSingle(t, Config{TickInterval: 5 * time.Millisecond}, func(d *logstore.Disk) logstore.Store { return d })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var tok uint64
	var err error
	for tok == 0 {
		if tok, err = n.Acquire(ctx, "k", time.Hour, 0, 0); err != nil && ctx.Err() != nil {
			t.Fatalf("acquire: %v", err)
		}
	}
	// The answer of a call whose caller already left.
	n.inspect(func(*member.Core) {
		n.deliver(map[uint64]*call{}, []member.Answer{{Handle: 1 << 60, Key: "k", Token: tok}})
	})
	for {
		if st, err := n.Status(ctx); err == nil && st.Locks == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the grant whose caller left is still held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := CounterValue(n.metrics.GhostReleases); got != 1 {
		t.Fatalf("ghost releases = %v, want 1", got)
	}
}

// A member's --peers is its own view of how to reach the members it names:
// a book learned from another member (bootstrapped through other
// addresses) must not make it dial, or listen on, that member's view.
// Chaos runs every member behind its own proxies; before this rule a
// member that installed the leader's snapshot restarted on the leader's
// proxy address for it and could not bind.
func TestStartedWithAddressesWinOverTheBook(t *testing.T) {
	book := member.NewBook(map[uint64]string{1: "leader-view-1", 2: "leader-view-2", 3: "leader-view-3"})
	book.Members = append(book.Members, member.Member{ID: 4, PeerAddr: "added-4"})
	book.Removed = []uint64{3}
	got := peersOf(book, map[uint64]string{1: "own-1", 2: "own-view-2", 3: "own-view-3"})
	want := map[uint64]string{1: "own-1", 2: "own-view-2", 4: "added-4"}
	if !maps.Equal(got, want) {
		t.Fatalf("peersOf = %v, want %v", got, want)
	}
}

// The loop syncs the transport's peers after every turn: when the address
// book has not moved, that costs no copy of it.
func TestSyncPeersCopiesNothingWhileTheBookStays(t *testing.T) {
	n := StartSingle(t, Config{}, func(d *logstore.Disk) logstore.Store { return d })
	var allocs float64
	if !n.inspect(func(c *member.Core) {
		n.syncPeers(c) // the first sync after start may copy
		allocs = testing.AllocsPerRun(100, func() { n.syncPeers(c) })
	}) {
		t.Fatal("the loop ended")
	}
	if allocs != 0 {
		t.Errorf("syncPeers with an unchanged book: %.0f allocations, want 0", allocs)
	}
}

// Request ids must not repeat across restarts whatever the wall clock
// does: each start draws where its ids begin, below 2^62 so that counting
// up never wraps.
func TestRequestIDsStartAtARandomPoint(t *testing.T) {
	seen := map[uint64]bool{}
	for range 64 {
		s, err := randomSeqStart()
		if err != nil {
			t.Fatal(err)
		}
		if s >= 1<<62 {
			t.Fatalf("start %d is not below 2^62", s)
		}
		if seen[s] {
			t.Fatalf("start %d drawn twice", s)
		}
		seen[s] = true
	}
}

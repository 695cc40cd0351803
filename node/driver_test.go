package node_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/logstore"
	"github.com/raftlock/raftlock/node/nodetest"
)

// failingCompact is a log store whose compactions fail once armed, as on a
// full disk.
type failingCompact struct {
	*logstore.Disk
	armed *atomic.Bool
}

func (f failingCompact) Compact(index uint64, cs *raftpb.ConfState, data []byte, compactTo uint64) error {
	if f.armed.Load() {
		return errors.New("injected: disk full")
	}
	return f.Disk.Compact(index, cs, data, compactTo)
}

// A command that committed and applied is never answered "stopped" (which
// the client protocol carries as Unavailable: nothing happened) when the
// disk fails in the Ready that carries its answer: the answer is true, so
// it is delivered before the member stops (found in review).
func TestDiskFailureNeverTurnsACommittedAnswerIntoStopped(t *testing.T) {
	armed := new(atomic.Bool)
	n := node.StartSingle(t, node.Config{Config: member.Config{SnapshotEvery: 1, SnapshotKeep: 1}, TickInterval: 5 * time.Millisecond},
		func(d *logstore.Disk) logstore.Store { return failingCompact{d, armed} })
	ctx := nodetest.Context(t, 10*time.Second)
	nodetest.WaitFor(t, 10*time.Second, "a member that may decide", func() bool {
		_, err := n.Get(ctx, "x", false)
		return err == nil
	})
	armed.Store(true)
	tok, err := n.Acquire(ctx, "k", time.Minute, 0, 0)
	n.Close()
	st := nodetest.Status(t, n)
	if st.LastToken != 0 && (err != nil || tok != st.LastToken) {
		t.Fatalf("the grant applied (token %d) but its caller heard token %d, %v", st.LastToken, tok, err)
	}
}

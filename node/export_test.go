package node

import (
	"github.com/raftlock/raftlock/member"
)

// What the external tests (package node_test, which run clusters through
// node/nodetest) need from inside the package. Only test binaries
// see these.

// Inspect runs f on n's loop goroutine; false when the loop has ended.
func Inspect(n *Node, f func(*member.Core)) bool { return n.inspect(f) }

// StorageFirstIndex is the first index in n's raft log store.
func (n *Node) StorageFirstIndex() (uint64, error) { return n.storage.FirstIndex() }

// ConfigOf returns n's config with the defaults filled in.
func ConfigOf(n *Node) Config { return n.cfg }

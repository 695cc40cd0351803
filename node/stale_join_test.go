package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node"
)

// Rule guarded: a joiner's first start is all or nothing. What a first
// start cut short before it stored its identity leaves (the seeded store)
// is taken by the next join as if the directory were empty; a directory
// holding anything else is refused rather than joined over.
func TestJoinOverWhatAnInterruptedJoinLeft(t *testing.T) {
	addr := func() string {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	self := addr()
	boot := map[uint64]string{1: addr(), 2: addr(), 3: addr()}
	join := func(dir string, bootstrap map[uint64]string) (*node.Node, error) {
		return node.New(node.Config{
			Config:     member.Config{ID: 4, Peers: map[uint64]string{4: self}},
			DataDir:    dir,
			ClientAddr: "127.0.0.1:1",
			Join:       &node.Join{ClusterID: 0xc1, Bootstrap: bootstrap, Members: map[uint64]string{4: self}},
		})
	}
	interrupted := func(t *testing.T) string {
		dir := t.TempDir()
		n, err := join(dir, boot)
		if err != nil {
			t.Fatal(err)
		}
		n.Close()
		// The crash came before the identity was stored.
		if err := os.Remove(filepath.Join(dir, "identity.json")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("same cluster", func(t *testing.T) {
		n, err := join(interrupted(t), boot)
		if err != nil {
			t.Fatalf("join over an interrupted join's leftovers: %v", err)
		}
		defer n.Close()
		if got := n.ClusterID(); got != 0xc1 {
			t.Fatalf("cluster id %x, want c1", got)
		}
	})
	t.Run("another bootstrap", func(t *testing.T) {
		other := map[uint64]string{1: boot[1], 2: boot[2], 5: addr()}
		n, err := join(interrupted(t), other)
		if err == nil {
			n.Close()
			t.Fatal("joined over another cluster's seed")
		}
		if !strings.Contains(err.Error(), "no cluster identity") {
			t.Fatalf("unexpected error: %v", err)
		}
	})
}

package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node/nodetest"
)

// BenchmarkAcquireRelease is one lock cycle through the in-process API of a
// three-member cluster on loopback TCP and real pebble directories: two
// commits, no client protocol.
func BenchmarkAcquireRelease(b *testing.B) {
	c := nodetest.New(b, 3, nil)
	l := c.WaitLeader()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		tok, err := l.Acquire(ctx, "k", time.Minute, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx, "k", tok, 0); err != nil {
			b.Fatal(err)
		}
	}
}

package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client/wire"
)

// Workloads.
const (
	Uncontended = "uncontended" // each client its own key: acquire + release
	Contended   = "contended"   // hot keys, waiting acquires: an op is one handoff
	Mixed       = "mixed"       // own key: acquire + linearizable get + release
)

// Spec is one measured run.
type Spec struct {
	Workload string
	Clients  int
	Rate     float64 // open loop: ops per second; 0: closed loop
	Duration time.Duration
	Warmup   time.Duration
	HotKeys  int
	// KeySize pads every key to this many bytes (0: the names as they
	// are, about 25 bytes), so that a run against a table of held locks
	// of that key size takes keys like theirs.
	KeySize int
}

// key names the lock a cycle takes. Each run has its own keys (run), so a
// run never waits on locks an earlier run left behind.
func (s Spec) key(run int64, client int, n int64) string {
	switch s.Workload {
	case Contended:
		return padKey(fmt.Sprintf("r%d-hot-%d", run, (client+int(n))%max(s.HotKeys, 1)), s.KeySize)
	}
	return padKey(fmt.Sprintf("r%d-own-%d", run, client), s.KeySize)
}

// Key sizes a bench may ask for: the longest key a member accepts
// (fsm.MaxKeyLen), and the shortest that still holds every name the bench
// gives a key (run id, role, number) unpadded.
const (
	MaxKeySize = wire.MaxKeyLen
	MinKeySize = 40
)

// padKey pads name with '.' to size bytes; a name as long already is kept.
func padKey(name string, size int) string {
	if len(name) >= size {
		return name
	}
	return name + strings.Repeat(".", size-len(name))
}

// cycle runs one operation of the workload and returns how long the lock
// took to get (for the contended workload's wait time).
func (s Spec) cycle(ctx context.Context, sess Session, key string) (time.Duration, error) {
	start := time.Now()
	unlock, err := sess.Lock(ctx, key, s.Workload == Contended)
	if err != nil {
		return 0, err
	}
	wait := time.Since(start)
	// The release must happen even when the run is being stopped: a lock
	// left held would stall the next run on the same cluster for a lease.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if s.Workload == Mixed {
		if err := sess.Read(ctx, key); err != nil {
			unlock(rctx)
			return wait, err
		}
	}
	return wait, unlock(rctx)
}

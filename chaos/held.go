package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/chaos/progress"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
)

// heldLease is how long the held locks are taken for: far past any run,
// so none expires and the table stays at its size while faults meet the
// snapshots that carry it.
const heldLease = time.Hour

// heldClients is how many callers fill the table at once: enough that the
// leader batches many grants per log entry.
const heldClients = 64

// heldPrefix starts every held key; the workload's keys are k1..kN and the
// harness's probe is raftlock-harness-probe, so none is ever touched.
const heldPrefix = "held-"

// HeldFill is the table filled before the workload (chaos --held).
type HeldFill struct {
	Locks   int     `json:"locks"`
	KeySize int     `json:"key_size"`
	Clients int     `json:"clients"`
	Seconds float64 `json:"seconds"`
}

// heldKey is held lock i's key, padded to size bytes.
func heldKey(i, size int) string {
	k := fmt.Sprintf("%s%07d-", heldPrefix, i)
	if len(k) >= size {
		return k
	}
	return k + strings.Repeat(".", size-len(k))
}

// fillHeld takes n locks on keys of keySize bytes, with heldClients
// concurrent callers on one pipelining client, printing a progress line
// every 3 s. The locks are never released: the cluster is thrown away
// with the run.
func fillHeld(ctx context.Context, endpoints []string, n, keySize int, w io.Writer) (HeldFill, error) {
	res := HeldFill{KeySize: keySize, Clients: heldClients}
	if n <= 0 {
		return res, nil
	}
	cl, err := client.New(endpoints, client.Options{})
	if err != nil {
		return res, fmt.Errorf("held locks: %w", err)
	}
	defer cl.Close()
	start := time.Now()
	var next, done atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := progress.Every(3*time.Second, func() {
		if w != nil {
			fmt.Fprintf(w, "chaos: held %d/%d locks, %.0f acquires/s\n", done.Load(), n, float64(done.Load())/time.Since(start).Seconds())
		}
	})
	var wg sync.WaitGroup
	for range heldClients {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := acquireHeld(ctx, cl, heldKey(i, keySize)); err != nil {
					cancel(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	stop()
	res.Locks, res.Seconds = int(done.Load()), time.Since(start).Seconds()
	if err := context.Cause(ctx); err != nil {
		return res, fmt.Errorf("held locks (%d of %d taken): %w", res.Locks, n, err)
	}
	return res, nil
}

// acquireHeld takes key for heldLease. An acquire whose outcome is unknown,
// or that finds the key held (an earlier attempt did take it: no one else
// takes held keys), is settled by reading the key.
func acquireHeld(ctx context.Context, cl *client.Client, key string) error {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := cl.Acquire(cctx, key, heldLease, 0)
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) && !errors.Is(err, client.ErrHeld) {
			return fmt.Errorf("acquire %s: %w", key, err)
		}
		cctx, cancel = context.WithTimeout(ctx, 20*time.Second)
		info, err := cl.Get(cctx, key)
		cancel()
		if err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		if info.Held {
			return nil
		}
	}
	return ctx.Err()
}

// validKeySize: a held key is at most the protocol's key length.
func validKeySize(n int) bool { return n >= 1 && n <= wire.MaxKeyLen }

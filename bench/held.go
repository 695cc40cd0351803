package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/periodic"
)

// Held is a table of locks the bench takes and keeps, so that the
// workloads run against a lock table of a chosen size: the member's costs
// that grow with the table (ticks over every lock, snapshots) only show
// against a big one.
type Held struct {
	cl      *client.Client
	prefix  string // unique to this bench run: never a key of another
	keySize int
	lease   time.Duration
	// tokens[i] is key i's token, 0 while it is not known to be held;
	// attempted is how many keys an acquire was sent for.
	tokens    []uint64
	attempted int
}

// FillResult is one fill of the table, from its size before to Locks.
type FillResult struct {
	From     int     `json:"from"`
	Locks    int     `json:"locks"`
	Clients  int     `json:"clients"`
	Seconds  float64 `json:"seconds"`
	RateOpsS float64 `json:"rate_acquires_s"`
}

// NewHeld prepares an empty table of held locks on t, which must be
// raftlock; keys are padded to keySize bytes (0: unpadded) and held for
// lease.
func NewHeld(t Target, keySize int, lease time.Duration) (*Held, error) {
	rt, ok := t.(*raftlockTarget)
	if !ok {
		return nil, fmt.Errorf("held locks: %s is not raftlock", t.Name())
	}
	return &Held{cl: rt.cl, prefix: fmt.Sprintf("held-%x", time.Now().UnixNano()), keySize: keySize, lease: lease}, nil
}

// Len is the number of locks held.
func (h *Held) Len() int { return len(h.tokens) }

func (h *Held) key(i int) string { return padKey(fmt.Sprintf("%s-%d", h.prefix, i), h.keySize) }

// FillTo takes locks until n are held, with clients concurrent acquires,
// printing progress every 3 s. On an error or the end of ctx the locks
// taken so far stay held and counted: Release releases them.
func (h *Held) FillTo(ctx context.Context, n, clients int, progress io.Writer) (FillResult, error) {
	progress = orDiscard(progress)
	from := len(h.tokens)
	if n <= from {
		return FillResult{From: from, Locks: from, Clients: clients}, nil
	}
	h.tokens = append(h.tokens, make([]uint64, n-from)...)
	start := time.Now()
	var done atomic.Int64
	stopProgress := reportEvery(ctx, 3*time.Second, func() {
		el := time.Since(start).Seconds()
		fmt.Fprintf(progress, "bench: fill %9d/%d locks held, %6.0f acquires/s\n", from+int(done.Load()), n, float64(done.Load())/el)
	})
	reached, err := h.forEach(ctx, from, n, clients, func(ctx context.Context, i int) error {
		tok, err := h.acquire(ctx, i)
		if err != nil {
			return err
		}
		h.tokens[i] = tok
		done.Add(1)
		return nil
	})
	stopProgress()
	h.attempted = max(h.attempted, reached)
	el := time.Since(start).Seconds()
	res := FillResult{From: from, Locks: from + int(done.Load()), Clients: clients, Seconds: el, RateOpsS: float64(done.Load()) / el}
	if err != nil {
		return res, fmt.Errorf("fill to %d locks: %w", n, err)
	}
	return res, nil
}

// acquire takes key i. An acquire whose outcome is unknown (or that finds
// the key held: an earlier attempt did take it) is settled by reading the
// key: only this bench takes its keys, so a holder is this bench.
func (h *Held) acquire(ctx context.Context, i int) (uint64, error) {
	key := h.key(i)
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		g, err := h.cl.Acquire(cctx, key, h.lease, 0)
		cancel()
		if err == nil {
			return g.Token, nil
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) && !errors.Is(err, client.ErrHeld) {
			return 0, fmt.Errorf("acquire %s: %w", key, err)
		}
		if tok, err := h.holder(ctx, key); err != nil || tok != 0 {
			return tok, err
		}
	}
	return 0, ctx.Err()
}

// holder is the token key is held with (0: free).
func (h *Held) holder(ctx context.Context, key string) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := h.cl.Get(cctx, key)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	if !info.Held {
		return 0, nil
	}
	return info.Token, nil
}

// Release releases every lock the table holds, and any an interrupted
// acquire may have taken, with clients concurrent releases. It runs to
// the end even after ctx ends (it is what Ctrl-C does), bounded by
// timeout; it returns how many it released.
func (h *Held) Release(ctx context.Context, clients int, timeout time.Duration, progress io.Writer) (int, error) {
	progress = orDiscard(progress)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	var released atomic.Int64
	stopProgress := reportEvery(rctx, 3*time.Second, func() {
		fmt.Fprintf(progress, "bench: release %9d/%d locks released\n", released.Load(), h.attempted)
	})
	defer stopProgress()
	_, err := h.forEach(rctx, 0, h.attempted, clients, func(ctx context.Context, i int) error {
		key, tok := h.key(i), h.tokens[i]
		if tok == 0 {
			var err error
			if tok, err = h.holder(ctx, key); err != nil || tok == 0 {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := h.cl.Release(cctx, key, tok)
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("release %s: %w", key, err)
		}
		h.tokens[i] = 0
		released.Add(1)
		return nil
	})
	if err == nil {
		h.tokens, h.attempted = h.tokens[:0], 0
	}
	return int(released.Load()), err
}

// forEach calls do for every index in [from, to) from clients goroutines;
// the first error stops the others and is returned. reached is the end of
// the indexes do was called for (all of them but the last few in flight
// may have completed).
func (h *Held) forEach(ctx context.Context, from, to, clients int, do func(context.Context, int) error) (reached int, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range max(clients, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := do(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return min(int(next.Load()), to), context.Cause(ctx)
}

// reportEvery calls report every d until the returned stop is called or
// ctx ends.
func reportEvery(ctx context.Context, d time.Duration, report func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		periodic.Run(ctx, d, report)
	}()
	return func() { cancel(); <-done }
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/client"
)

// FencedStore is the resource the locks guard: it rejects any access with a
// token lower than the highest it has accepted, and holds a counter that
// each critical section increments. Each access is recorded in the history
// under the store's lock, so the history shows the store's own order.
type FencedStore struct {
	mu      sync.Mutex
	rec     *history.Recorder
	highest map[string]uint64
	counter map[string]int64
}

// NewFencedStore returns an empty store recording into rec.
func NewFencedStore(rec *history.Recorder) *FencedStore {
	return &FencedStore{rec: rec, highest: map[string]uint64{}, counter: map[string]int64{}}
}

// Read returns the counter of key if token is not stale.
func (s *FencedStore) Read(p history.Process, key string, token uint64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec.Record(p, history.Invoke, history.OpRead, key, history.Value{Token: &token})
	if token < s.highest[key] {
		s.rec.Record(p, history.Fail, history.OpRead, key, history.Value{Error: "stale-token"})
		return 0, false
	}
	s.highest[key] = token
	v := s.counter[key]
	s.rec.Record(p, history.OK, history.OpRead, key, history.Value{Value: &v})
	return v, true
}

// Write sets the counter of key if token is not stale.
func (s *FencedStore) Write(p history.Process, key string, token uint64, v int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec.Record(p, history.Invoke, history.OpWrite, key, history.Value{Token: &token, Value: &v})
	if token < s.highest[key] {
		s.rec.Record(p, history.Fail, history.OpWrite, key, history.Value{Error: "stale-token"})
		return false
	}
	s.highest[key] = token
	s.counter[key] = v
	s.rec.Record(p, history.OK, history.OpWrite, key, history.Value{Value: &v})
	return true
}

// Workload drives a cluster with contended lock traffic.
type Workload struct {
	Clients   int
	Keys      []string
	LeaseMin  time.Duration
	LeaseMax  time.Duration
	Endpoints []string
	// Spare are client addresses of members the run may add: the
	// clients know them from the start (unused ones refuse connections).
	Spare []string
	Seed  uint64
	Rec   *history.Recorder
	Store *FencedStore

	nextProc atomic.Int64
	Counts   Counts
}

// Counts are live totals for the progress line.
type Counts struct {
	OK, Fail, Info atomic.Int64
}

func (w *Workload) newProcess() history.Process { return history.Process(w.nextProc.Add(1) - 1) }

// Run runs the clients until ctx ends.
func (w *Workload) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errc := make(chan error, w.Clients)
	for i := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.worker(ctx, i); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// worker is one client thread: it uses one process id until an operation's
// outcome is unknown, then takes a fresh one.
type worker struct {
	w      *Workload
	rng    *rand.Rand
	cl     *client.Client
	reader *client.Client // talks to one member first, to expose stale reads
	proc   history.Process
}

func (w *Workload) worker(ctx context.Context, i int) error {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(i)+1))
	eps := append([]string(nil), w.Endpoints...)
	rng.Shuffle(len(eps), func(a, b int) { eps[a], eps[b] = eps[b], eps[a] })
	cl, err := client.New(append(slices.Clone(eps), w.Spare...), client.Options{})
	if err != nil {
		return err
	}
	defer cl.Close()
	reader, err := client.New(eps[:1], client.Options{})
	if err != nil {
		return err
	}
	defer reader.Close()
	wk := &worker{w: w, rng: rng, cl: cl, reader: reader, proc: w.newProcess()}
	for ctx.Err() == nil {
		key := w.Keys[rng.IntN(len(w.Keys))]
		if rng.Float64() < 0.15 {
			wk.get(ctx, key)
			continue
		}
		if rng.Float64() < 0.02 {
			wk.forceRelease(ctx, key)
			continue
		}
		if rng.Float64() < 0.03 {
			wk.list(ctx)
			continue
		}
		wk.cycle(ctx, key)
	}
	return nil
}

func (wk *worker) record(typ, f, key string, v history.Value) {
	wk.w.Rec.Record(wk.proc, typ, f, key, v)
	switch typ {
	case history.OK:
		wk.w.Counts.OK.Add(1)
	case history.Fail:
		wk.w.Counts.Fail.Add(1)
	case history.Info:
		wk.w.Counts.Info.Add(1)
		wk.proc = wk.w.newProcess() // a process never issues again after an info
	}
}

// definite classifies an error: a definite failure (nothing happened) with
// its history error string, or not (the outcome is unknown).
func definite(err error) (string, bool) {
	var inv *client.InvalidArgumentError
	var se *client.ServerError
	switch {
	case errors.Is(err, client.ErrHeld):
		return "held", true
	case errors.Is(err, client.ErrNotFound):
		return "not-found", true
	case errors.Is(err, client.ErrOutcomeUnknown):
		return "", false
	case errors.Is(err, client.ErrUnavailable):
		return "unavailable", true
	case errors.As(err, &inv):
		return "invalid-argument", true
	case errors.As(err, &se) && strings.Contains(se.Reason, "rejected"):
		return "grant-rejected", true
	}
	return "", false
}

func (wk *worker) complete(f, key string, err error, ok history.Value) bool {
	if err == nil {
		wk.record(history.OK, f, key, ok)
		return true
	}
	if e, isDefinite := definite(err); isDefinite {
		wk.record(history.Fail, f, key, history.Value{Error: e})
	} else {
		wk.record(history.Info, f, key, history.Value{Error: err.Error()})
	}
	return false
}

func (wk *worker) get(ctx context.Context, key string) {
	wk.record(history.Invoke, history.OpGet, key, history.Value{})
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	info, err := wk.reader.Get(cctx, key)
	cancel()
	v := history.Value{Held: history.Ptr(info.Held)}
	if info.Held {
		v.Token, v.Owner = history.Ptr(info.Token), info.Owner
	}
	if err != nil {
		// A read has no effect: a failed one is simply a failure.
		wk.record(history.Fail, history.OpGet, key, history.Value{Error: "unavailable"})
		return
	}
	wk.record(history.OK, history.OpGet, key, v)
}

// list reads a page of the table, from the first key or after a random
// one, of a random size (cut pages included), through the reader's member
// first, as get does.
func (wk *worker) list(ctx context.Context) {
	keys := wk.w.Keys
	after := ""
	if wk.rng.IntN(2) == 0 {
		after = keys[wk.rng.IntN(len(keys))]
	}
	limit := 1 + wk.rng.IntN(len(keys)+1)
	wk.record(history.Invoke, history.OpList, "", history.Value{After: after, Limit: history.Ptr(int64(limit))})
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	page, err := wk.reader.List(cctx, client.ListOptions{After: after, Limit: limit})
	cancel()
	if err != nil {
		wk.record(history.Fail, history.OpList, "", history.Value{Error: "unavailable"})
		return
	}
	v := history.Value{More: history.Ptr(page.More)}
	for _, l := range page.Locks {
		v.Locks = append(v.Locks, history.ListedLock{Key: l.Key, Token: l.Token, Owner: l.Owner})
	}
	wk.record(history.OK, history.OpList, "", v)
}

// forceRelease is an operator freeing key whatever holds it (rule 12): the
// holder it evicts finds out at its next release or renewal, and the
// fenced store keeps refusing its token once the next holder used its own.
func (wk *worker) forceRelease(ctx context.Context, key string) {
	inv := wk.w.Rec.Record(wk.proc, history.Invoke, history.OpRelease, key, history.Value{Force: true})
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	tok, err := wk.cl.ForceReleaseTagged(cctx, key, uint64(inv.Index)+1)
	cancel()
	wk.complete(history.OpRelease, key, err, history.Value{Token: history.Ptr(tok)})
}

// cycle acquires key and, holding it, runs a critical section on the fenced
// store, sometimes pausing past its lease, sometimes renewing, usually
// releasing.
func (wk *worker) cycle(ctx context.Context, key string) {
	w, rng := wk.w, wk.rng
	lease := w.LeaseMin + time.Duration(rng.Int64N(int64(w.LeaseMax-w.LeaseMin)+1))
	lease = lease.Truncate(time.Millisecond)
	var wait time.Duration
	if rng.IntN(2) == 0 {
		wait = time.Duration(rng.Int64N(int64(500 * time.Millisecond))).Truncate(time.Millisecond)
	}
	owner := fmt.Sprintf("chaos-%d", wk.proc)
	inv := w.Rec.Record(wk.proc, history.Invoke, history.OpAcquire, key,
		history.Value{LeaseMS: history.Ptr(lease.Milliseconds()), WaitMS: history.Ptr(wait.Milliseconds()), Owner: owner})
	cctx, cancel := context.WithTimeout(ctx, wait+2*time.Second)
	g, err := wk.cl.AcquireWith(cctx, client.AcquireRequest{Key: key, Lease: lease, Wait: wait, Owner: owner, Tag: uint64(inv.Index) + 1})
	cancel()
	if !wk.complete(history.OpAcquire, key, err, history.Value{Token: history.Ptr(g.Token)}) {
		return
	}
	token := g.Token
	proc := wk.proc
	v, ok := w.Store.Read(proc, key, token)
	if rng.Float64() < 0.05 {
		// The GC-pause case: the holder stalls past its lease.
		sleep(ctx, lease+time.Duration(rng.Int64N(int64(100*time.Millisecond))))
	}
	if ok {
		w.Store.Write(proc, key, token, v+1)
	}
	if rng.Float64() < 0.3 {
		// Tagged with the invoke index + 1, as acquires: the audit finds it.
		inv := w.Rec.Record(wk.proc, history.Invoke, history.OpRenew, key, history.Value{Token: history.Ptr(token), LeaseMS: history.Ptr(lease.Milliseconds())})
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := wk.cl.RenewTagged(cctx, key, token, lease, uint64(inv.Index)+1)
		cancel()
		if !wk.complete(history.OpRenew, key, err, history.Value{}) && !errors.Is(err, client.ErrNotFound) {
			return
		}
	}
	if rng.Float64() < 0.9 {
		inv := w.Rec.Record(wk.proc, history.Invoke, history.OpRelease, key, history.Value{Token: history.Ptr(token)})
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := wk.cl.ReleaseTagged(cctx, key, token, uint64(inv.Index)+1)
		cancel()
		wk.complete(history.OpRelease, key, err, history.Value{})
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func newClient(endpoints []string) (*client.Client, error) {
	return client.New(endpoints, client.Options{})
}

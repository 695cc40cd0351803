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

	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/client"
)

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
	Rec   workload.Recorder
	Store workload.Store
	// First is the index of the first client's random stream (0 in the
	// harness; a chaos-client process takes the one after the harness's
	// own clients', so no two clients draw alike).
	First int
	// NewProcess, when set, gives a client its history process id (a
	// chaos-client process asks the harness, which numbers every
	// client); else the workload numbers its own from 0.
	NewProcess func() history.Process
	// Dial, when set, connects worker i's clients to endpoints (its
	// writer to all of them, its reader to the first only); else they use
	// raftlock's binary protocol (client.New). A protocol or a target
	// other than raftlock's binary port plugs in here.
	Dial func(i int, endpoints []string) (LockClient, error)

	nextProc atomic.Int64
	Counts   Counts
}

// LockClient is what a workload client calls: *client.Client, or an
// adapter for another protocol or lock service. Errors follow the client
// package's: ErrHeld, ErrNotFound, ErrUnavailable (nothing happened),
// *client.InvalidArgumentError, and anything else (ErrOutcomeUnknown
// included) is an unknown outcome. A tag is the history's invoke index + 1,
// which the audit looks for in the committed log; an adapter that cannot
// carry one drops it, and the audit then settles none of its operations.
type LockClient interface {
	AcquireWith(ctx context.Context, r client.AcquireRequest) (client.Grant, error)
	RenewTagged(ctx context.Context, key string, token uint64, lease time.Duration, tag uint64) error
	ReleaseTagged(ctx context.Context, key string, token, tag uint64) error
	ForceReleaseTagged(ctx context.Context, key string, tag uint64) (uint64, error)
	Get(ctx context.Context, key string) (client.LockInfo, error)
	List(ctx context.Context, o client.ListOptions) (client.LockPage, error)
	Close() error
}

// Counts are live totals for the progress line.
type Counts struct {
	OK, Fail, Info atomic.Int64
}

func (w *Workload) newProcess() history.Process {
	if w.NewProcess != nil {
		return w.NewProcess()
	}
	return history.Process(w.nextProc.Add(1) - 1)
}

// Run runs the clients until ctx ends.
func (w *Workload) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errc := make(chan error, w.Clients)
	for i := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.worker(ctx, w.First+i); err != nil {
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
	cl     LockClient
	reader LockClient // talks to one member first, to expose stale reads
	proc   history.Process
}

func (w *Workload) worker(ctx context.Context, i int) error {
	rng := workload.Rand(w.Seed, i)
	eps := append([]string(nil), w.Endpoints...)
	rng.Shuffle(len(eps), func(a, b int) { eps[a], eps[b] = eps[b], eps[a] })
	cl, err := w.dial(i, append(slices.Clone(eps), w.Spare...))
	if err != nil {
		return err
	}
	defer cl.Close()
	reader, err := w.dial(i, eps[:1])
	if err != nil {
		return err
	}
	defer reader.Close()
	wk := &worker{w: w, rng: rng, cl: cl, reader: reader, proc: w.newProcess()}
	plan := w.plan()
	for ctx.Err() == nil {
		switch kind, key := plan.Next(rng); kind {
		case workload.Get:
			wk.get(ctx, key)
		case workload.ForceRelease:
			wk.forceRelease(ctx, key)
		case workload.List:
			wk.list(ctx, plan)
		default:
			wk.cycle(ctx, plan, key)
		}
	}
	return nil
}

func (w *Workload) dial(i int, endpoints []string) (LockClient, error) {
	if w.Dial != nil {
		return w.Dial(i, endpoints)
	}
	return client.New(endpoints, client.Options{})
}

func (w *Workload) plan() workload.Plan {
	return workload.Plan{Keys: w.Keys, LeaseMin: w.LeaseMin, LeaseMax: w.LeaseMax}
}

func (wk *worker) record(typ, f, key string, v history.Value) {
	wk.w.Rec.Record(wk.proc, typ, f, key, v)
	wk.w.count(typ)
	if typ == history.Info {
		wk.proc = wk.w.newProcess() // a process never issues again after an info
	}
}

// count adds a completion of type typ to the progress line's totals.
func (w *Workload) count(typ string) {
	switch typ {
	case history.OK:
		w.Counts.OK.Add(1)
	case history.Fail:
		w.Counts.Fail.Add(1)
	case history.Info:
		w.Counts.Info.Add(1)
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
	cctx, cancel := context.WithTimeout(ctx, workload.OpTimeout)
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
func (wk *worker) list(ctx context.Context, plan workload.Plan) {
	after, limit := plan.Page(wk.rng)
	wk.record(history.Invoke, history.OpList, "", history.Value{After: after, Limit: history.Ptr(int64(limit))})
	cctx, cancel := context.WithTimeout(ctx, workload.OpTimeout)
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
	cctx, cancel := context.WithTimeout(ctx, workload.OpTimeout)
	tok, err := wk.cl.ForceReleaseTagged(cctx, key, uint64(inv.Index)+1)
	cancel()
	wk.complete(history.OpRelease, key, err, history.Value{Token: history.Ptr(tok)})
}

// cycle acquires key and, holding it, runs a critical section on the fenced
// store, sometimes pausing past its lease, sometimes renewing, usually
// releasing.
func (wk *worker) cycle(ctx context.Context, plan workload.Plan, key string) {
	w, rng := wk.w, wk.rng
	lease, wait := plan.Acquire(rng)
	owner := fmt.Sprintf("chaos-%d", wk.proc)
	inv := w.Rec.Record(wk.proc, history.Invoke, history.OpAcquire, key,
		history.Value{LeaseMS: history.Ptr(lease.Milliseconds()), WaitMS: history.Ptr(wait.Milliseconds()), Owner: owner})
	cctx, cancel := context.WithTimeout(ctx, wait+workload.OpTimeout)
	g, err := wk.cl.AcquireWith(cctx, client.AcquireRequest{Key: key, Lease: lease, Wait: wait, Owner: owner, Tag: uint64(inv.Index) + 1})
	cancel()
	if !wk.complete(history.OpAcquire, key, err, history.Value{Token: history.Ptr(g.Token)}) {
		return
	}
	token := g.Token
	proc := wk.proc
	v, ok := w.Store.Read(proc, key, token)
	if d, stall := plan.Stall(rng, lease); stall {
		sleep(ctx, d)
	}
	if ok {
		w.Store.Write(proc, key, token, v+1)
	}
	if plan.Renew(rng) {
		// Tagged with the invoke index + 1, as acquires: the audit finds it.
		inv := w.Rec.Record(wk.proc, history.Invoke, history.OpRenew, key, history.Value{Token: history.Ptr(token), LeaseMS: history.Ptr(lease.Milliseconds())})
		cctx, cancel := context.WithTimeout(ctx, workload.OpTimeout)
		err := wk.cl.RenewTagged(cctx, key, token, lease, uint64(inv.Index)+1)
		cancel()
		if !wk.complete(history.OpRenew, key, err, history.Value{}) && !errors.Is(err, client.ErrNotFound) {
			return
		}
	}
	if plan.Release(rng) {
		inv := w.Rec.Record(wk.proc, history.Invoke, history.OpRelease, key, history.Value{Token: history.Ptr(token)})
		cctx, cancel := context.WithTimeout(ctx, workload.OpTimeout)
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

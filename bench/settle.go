package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/raftlock/raftlock/client"
)

// settleClients is how many keys settle frees at once.
const settleClients = 16

// ledger is what the bench's clients may have left held on a raftlock
// cluster: the locks taken and not yet released, and the keys an acquire
// ended on without an answer that says it took nothing (the run's end cut
// it off, or the connection broke after it was sent). A cycle releases
// what it took, but a release can fail, and an acquire answered after the
// run's end has nobody left to release it; on a cluster the bench did not
// start such a lock would stay held for its lease.
type ledger struct {
	mu     sync.Mutex
	held   map[string]uint64 // key -> token of a grant not yet released
	unsure map[string]bool
}

func (l *ledger) took(key string, token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = make(map[string]uint64)
	}
	// One grant at a time holds a key: a later token replaces an earlier
	// one, which is no longer held.
	l.held[key] = token
}

func (l *ledger) released(key string, token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[key] == token {
		delete(l.held, key)
	}
}

func (l *ledger) doubt(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unsure == nil {
		l.unsure = make(map[string]bool)
	}
	l.unsure[key] = true
}

// take empties the ledger and returns what it had.
func (l *ledger) take() (held map[string]uint64, unsure map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held, unsure = l.held, l.unsure
	l.held, l.unsure = nil, nil
	return held, unsure
}

// settle releases every lock the ledger says the bench's clients may still
// hold, and returns how many it released. It must run once the clients
// have stopped: a key the ledger doubts is read, and its holder released,
// until it is free; only the bench takes its keys (each run names its
// own), so a holder is a client of the bench.
func (t *raftlockTarget) settle(ctx context.Context) (int, error) {
	held, unsure := t.ledger.take()
	if len(held) == 0 && len(unsure) == 0 {
		return 0, nil
	}
	type work struct {
		key   string
		token uint64 // 0: read the holder
	}
	todo := make(chan work, len(held)+len(unsure))
	for k, tok := range held {
		todo <- work{k, tok}
	}
	for k := range unsure {
		if _, ok := held[k]; !ok {
			todo <- work{k, 0}
		}
	}
	close(todo)
	var released atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range settleClients {
		wg.Go(func() {
			for w := range todo {
				n, err := t.free(ctx, w.key, w.token)
				released.Add(int64(n))
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return int(released.Load()), fmt.Errorf("%d of %d keys not released: %w", len(errs), len(held)+len(unsure), errs[0])
	}
	return int(released.Load()), nil
}

// free releases key: first the grant of token, when known, then whatever
// grant holds it, until a read finds it free; it returns how many grants
// it released.
func (t *raftlockTarget) free(ctx context.Context, key string, token uint64) (int, error) {
	n := 0
	for {
		if token == 0 {
			info, err := t.cl.Get(ctx, key)
			if err != nil {
				return n, fmt.Errorf("read %s: %w", key, err)
			}
			if !info.Held {
				return n, nil
			}
			token = info.Token
		}
		err := t.cl.Release(ctx, key, token)
		switch {
		case err == nil:
			n++
		case errors.Is(err, client.ErrNotFound), errors.Is(err, client.ErrOutcomeUnknown):
			// Not held with token (any more), or perhaps released: the
			// read says.
		default:
			return n, fmt.Errorf("release %s: %w", key, err)
		}
		// Read again: an acquire still queued when the run ended may be
		// granted the key next.
		token = 0
	}
}

// Package workload is the one client workload of raftlock's two
// harnesses, the real-process chaos run and the simulator: what each
// client does next (Plan), drawn from its own seeded stream, the fenced
// resource the locks guard (FencedStore), and the history's header
// (Header). chaos runs the plan on real clients and goroutines, the
// simulator as state machines on its event queue.
package workload

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker/history"
)

// Timeouts of the client calls: an acquire gets its wait on top.
const (
	OpTimeout = 2 * time.Second
	// MaxWait bounds an acquire's wait (drawn for half the acquires).
	MaxWait = 500 * time.Millisecond
	// MaxStall is how far past its lease a stalled holder sleeps at most.
	MaxStall = 100 * time.Millisecond
)

// Rand is client i's random stream for seed: one per client, so that one
// client's choices do not shift when another's change.
func Rand(seed uint64, i int) *rand.Rand { return rand.New(rand.NewPCG(seed, uint64(i)+1)) }

// Kind is what a client does next.
type Kind int

// The kinds: a read of one key, an operator's forced release, a page of
// the table, or a lock cycle (acquire, a critical section on the fenced
// store, maybe a renewal, usually a release).
const (
	Get Kind = iota
	ForceRelease
	List
	Cycle
)

// Plan draws the workload's choices. Each method takes the client's
// stream and draws in a fixed order, so a seed replays.
type Plan struct {
	Keys     []string
	LeaseMin time.Duration
	LeaseMax time.Duration
}

// Next draws the key and what to do with it: a get (15 %), a forced
// release (2 % of the rest), a list (3 % of the rest), else a cycle.
func (p Plan) Next(rng *rand.Rand) (Kind, string) {
	key := p.Keys[rng.IntN(len(p.Keys))]
	switch {
	case rng.Float64() < 0.15:
		return Get, key
	case rng.Float64() < 0.02:
		return ForceRelease, key
	case rng.Float64() < 0.03:
		return List, key
	}
	return Cycle, key
}

// Page draws a list's page: from the first key or after a random one, of
// a random size, so pages are sometimes cut (more) and sometimes not.
func (p Plan) Page(rng *rand.Rand) (after string, limit int) {
	if rng.IntN(2) == 0 {
		after = p.Keys[rng.IntN(len(p.Keys))]
	}
	return after, 1 + rng.IntN(len(p.Keys)+1)
}

// Acquire draws a cycle's lease (LeaseMin to LeaseMax, in whole ms) and
// wait (none for half the acquires, else up to MaxWait).
func (p Plan) Acquire(rng *rand.Rand) (lease, wait time.Duration) {
	lease = p.LeaseMin + time.Duration(rng.Int64N(int64(p.LeaseMax-p.LeaseMin)+1))
	lease = lease.Truncate(time.Millisecond)
	if rng.IntN(2) == 0 {
		wait = time.Duration(rng.Int64N(int64(MaxWait))).Truncate(time.Millisecond)
	}
	return lease, wait
}

// Stall draws whether the holder stalls in its critical section, and for
// how long: one time in twenty past its lease (the GC-pause case).
func (p Plan) Stall(rng *rand.Rand, lease time.Duration) (time.Duration, bool) {
	if rng.Float64() < 0.05 {
		return lease + time.Duration(rng.Int64N(int64(MaxStall))), true
	}
	return 0, false
}

// Renew draws whether the holder renews (30 %).
func (p Plan) Renew(rng *rand.Rand) bool { return rng.Float64() < 0.3 }

// Release draws whether the holder releases (90 %), or lets the lease run
// out.
func (p Plan) Release(rng *rand.Rand) bool { return rng.Float64() < 0.9 }

// Recorder appends an event to a history: *history.Recorder, or the
// simulator's.
type Recorder interface {
	Record(p history.Process, typ, f, key string, v history.Value) history.Event
}

// Store is the resource as a client's critical section uses it: a
// *FencedStore, or a chaos-client process's way to the harness's.
type Store interface {
	// Read returns the counter of key, false if the store refused token.
	Read(p history.Process, key string, token uint64) (int64, bool)
	// Write sets the counter of key, false if the store refused token.
	Write(p history.Process, key string, token uint64, v int64) bool
}

// Resource names the resource the locks guard (raftlock chaos
// --resource): what a run shows is what fencing buys.
type Resource string

// The resources. Fenced is the default and every run before --resource
// existed: the store refuses a token lower than the highest it accepted.
// Unfenced is a Jepsen-style read-sleep-write register (the sleep is the
// plan's stall, or a paused client): it accepts every access whatever its
// token, so a client that lost its lock overwrites the next holder's
// update. The history records its accesses as the fenced store's, tokens
// included, so the fenced-resource check finds the stale writes and the
// updates they lost: a lease-based lock without fencing is expected to
// fail it under pauses.
const (
	Fenced   Resource = "fenced"
	Unfenced Resource = "unfenced"
)

// Resources are the valid modes, in the order --resource documents them.
var Resources = []Resource{Fenced, Unfenced}

// FencedStore is the resource the locks guard: it rejects any access with
// a token lower than the highest it has accepted (unless made unfenced by
// NewResource), and holds a counter that each critical section increments.
// Each access is recorded under the store's lock, so the history shows the
// store's own order.
type FencedStore struct {
	mu       sync.Mutex
	rec      Recorder
	unfenced bool
	highest  map[string]uint64
	counter  map[string]int64
}

// NewFencedStore returns an empty fenced store recording into rec.
func NewFencedStore(rec Recorder) *FencedStore { return NewResource(rec, Fenced) }

// NewResource returns an empty store of mode recording into rec: fenced,
// or unfenced (Unfenced: it checks no token).
func NewResource(rec Recorder, mode Resource) *FencedStore {
	return &FencedStore{rec: rec, unfenced: mode == Unfenced, highest: map[string]uint64{}, counter: map[string]int64{}}
}

// Read returns the counter of key if token is not stale.
func (s *FencedStore) Read(p history.Process, key string, token uint64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec.Record(p, history.Invoke, history.OpRead, key, history.Value{Token: &token})
	if !s.admit(p, history.OpRead, key, token) {
		return 0, false
	}
	v := s.counter[key]
	s.rec.Record(p, history.OK, history.OpRead, key, history.Value{Value: &v})
	return v, true
}

// Write sets the counter of key if token is not stale.
func (s *FencedStore) Write(p history.Process, key string, token uint64, v int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec.Record(p, history.Invoke, history.OpWrite, key, history.Value{Token: &token, Value: &v})
	if !s.admit(p, history.OpWrite, key, token) {
		return false
	}
	s.counter[key] = v
	s.rec.Record(p, history.OK, history.OpWrite, key, history.Value{Value: &v})
	return true
}

// admit checks token against the highest accepted for key: a stale one
// fails the access, any other becomes the highest. An unfenced store
// admits every token.
func (s *FencedStore) admit(p history.Process, f, key string, token uint64) bool {
	if s.unfenced {
		return true
	}
	if token < s.highest[key] {
		s.rec.Record(p, history.Fail, f, key, history.Value{Error: "stale-token"})
		return false
	}
	s.highest[key] = token
	return true
}

// Header is what both harnesses write in a history's header line; each
// adds its own fields (Map's extra).
type Header struct {
	Seed          uint64
	Nodes         int
	Nemeses       []fault.Family
	Clients       int
	Keys          []string
	LeaseMin      time.Duration
	LeaseMax      time.Duration
	Time          time.Duration // how long the workload runs
	Bug           string
	SnapshotEvery uint64
	SnapshotKeep  uint64
	Held          int
	KeySize       int
}

// Map is the header as the history writes it, with extra's fields added.
func (h Header) Map(extra map[string]any) map[string]any {
	m := map[string]any{
		"seed": h.Seed, "nodes": h.Nodes, "nemeses": h.Nemeses, "clients": h.Clients, "keys": h.Keys,
		"lease_min_ms": h.LeaseMin.Milliseconds(), "lease_max_ms": h.LeaseMax.Milliseconds(),
		"time_s": h.Time.Seconds(), "bug": h.Bug, "snapshot_every": h.SnapshotEvery, "snapshot_keep": h.SnapshotKeep,
		"held": h.Held, "key_size": h.KeySize,
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// Keys are the workload's keys: k1 to kN.
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i+1)
	}
	return keys
}

package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/node/logstore"
)

// errInjected marks an I/O error the simulator injected: the member stops,
// as a real one would on a failed fsync, and may be restarted later from
// its durable state. Any other store error is a bug the run reports.
var errInjected = errors.New("injected I/O error")

// Store is one member's disk: an in-memory raft log store with exactly the
// semantics of logstore.Disk (node/logstore/store.go), written as a WAL would
// be. Each Save or Compact is one atomic batch of operations; a synced batch
// makes every earlier batch durable too; a power loss keeps the durable
// state plus a seeded-random prefix (possibly empty) of the batches written
// since the last sync. The raft.MemoryStorage it embeds is the mirror raft
// reads, rebuilt from the durable state on every Open, as logstore.Disk does.
type Store struct {
	*raft.MemoryStorage

	durable diskState
	pending []batch // written, not yet synced, oldest first
}

// diskState is what the disk holds: pebble's keys of logstore.Disk.
type diskState struct {
	snap *raftpb.Snapshot  // key "s"; nil before the first Open
	hs   *raftpb.HardState // key "h"; nil: never written
	ents []*raftpb.Entry   // keys "e<index>", sorted by index, maybe with gaps
}

// diskOp is one write of a batch; they apply in order, as pebble's do.
type diskOp struct {
	kind   opKind
	snap   *raftpb.Snapshot
	hs     *raftpb.HardState
	ents   []*raftpb.Entry
	lo, hi uint64 // deleteRange: indexes [lo, hi)
}

type opKind uint8

const (
	opSetSnap opKind = iota
	opSetHardState
	opSetEntries
	opDeleteRange
)

type batch []diskOp

// NewStore returns an empty disk. Open must be called before use.
func NewStore() *Store { return &Store{} }

// Open (re)builds the mirror from the durable state, as logstore.Open
// does after a restart: a fresh disk gets the initial configuration (written
// synced); a stored snapshot, hard state and entries are loaded and checked.
// Unsynced writes must have been settled by Crash or Kill before.
func (s *Store) Open(voters []uint64) error {
	if len(s.pending) > 0 {
		return errors.New("open with unsettled writes: crash or kill first")
	}
	s.MemoryStorage = raft.NewMemoryStorage()
	if s.durable.snap == nil {
		s.durable.snap = &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
			ConfState: &raftpb.ConfState{Voters: slices.Clone(voters)},
			Index:     new(uint64(0)), Term: new(uint64(0)),
		}}
	}
	if hs := s.durable.hs; hs != nil {
		if err := s.MemoryStorage.SetHardState(hs); err != nil {
			return fmt.Errorf("load hard state: %w", err)
		}
	}
	for i := 1; i < len(s.durable.ents); i++ {
		if a, b := s.durable.ents[i-1].GetIndex(), s.durable.ents[i].GetIndex(); b != a+1 {
			return fmt.Errorf("load raft log: log gap: entry %d after %d", b, a)
		}
	}
	if err := s.mirror(s.durable.snap, slices.Clone(s.durable.ents)); err != nil {
		return fmt.Errorf("load raft log: %w", err)
	}
	return nil
}

// mirror loads the snapshot and the stored entries into the in-memory log,
// as logstore.Disk does when it opens.
func (s *Store) mirror(snap *raftpb.Snapshot, ents []*raftpb.Entry) error {
	return logstore.Load(s.MemoryStorage, snap, ents)
}

// Save is logstore.Disk.Save: one atomic batch holding the snapshot
// (which deletes every stored entry), the entries (truncating a conflicting
// suffix) and the hard state. With sync the batch and every earlier one are
// durable when it returns (or, with a slow sync, when Synced is called);
// fail injects an I/O error: the batch may have reached the disk unsynced,
// and the member must stop.
func (s *Store) Save(hs *raftpb.HardState, entries []*raftpb.Entry, snap *raftpb.Snapshot, sync, deferSync, fail bool) error {
	var b batch
	hasSnap := snap != nil && !raft.IsEmptySnap(snap)
	if hasSnap {
		b = append(b, diskOp{kind: opSetSnap, snap: snap}, diskOp{kind: opDeleteRange, lo: 0, hi: ^uint64(0)})
	}
	if len(entries) > 0 {
		b = append(b, diskOp{kind: opSetEntries, ents: entries})
		last := entries[len(entries)-1].GetIndex()
		if stored, err := s.MemoryStorage.LastIndex(); err == nil && stored > last && !hasSnap {
			b = append(b, diskOp{kind: opDeleteRange, lo: last + 1, hi: stored + 1})
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		b = append(b, diskOp{kind: opSetHardState, hs: hs})
	}
	s.pending = append(s.pending, b)
	if fail {
		return fmt.Errorf("commit raft batch: %w", errInjected)
	}
	if sync && !deferSync {
		s.Synced()
	}
	if hasSnap {
		if err := s.MemoryStorage.ApplySnapshot(snap); err != nil {
			return fmt.Errorf("install snapshot: %w", err)
		}
	}
	if err := s.MemoryStorage.Append(entries); err != nil {
		return fmt.Errorf("append to log mirror: %w", err)
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		return s.MemoryStorage.SetHardState(hs)
	}
	return nil
}

// Synced makes every batch written so far durable: an fsync returned.
func (s *Store) Synced() {
	for _, b := range s.pending {
		s.durable.apply(b)
	}
	s.pending = s.pending[:0]
}

// Compact is logstore.Disk.Compact: store a snapshot at index (synced,
// as pebble.Sync is) and drop the stored entries before compactTo. An index
// above the last stored entry is an error, never a panic.
func (s *Store) Compact(index uint64, cs *raftpb.ConfState, data []byte, compactTo uint64, fail bool) error {
	if last, err := s.MemoryStorage.LastIndex(); err != nil || index > last {
		return fmt.Errorf("create snapshot at %d: above the last stored entry %d", index, last)
	}
	snap, err := s.MemoryStorage.CreateSnapshot(index, cs, data)
	if errors.Is(err, raft.ErrSnapOutOfDate) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create snapshot at %d: %w", index, err)
	}
	if first, err := s.MemoryStorage.FirstIndex(); err == nil && compactTo < first {
		compactTo = first
	}
	if compactTo > index {
		compactTo = index
	}
	s.pending = append(s.pending, batch{{kind: opSetSnap, snap: snap}, {kind: opDeleteRange, lo: 0, hi: compactTo}})
	if fail {
		return fmt.Errorf("persist snapshot at %d: %w", index, errInjected)
	}
	s.Synced()
	if err := s.MemoryStorage.Compact(compactTo); err != nil && !errors.Is(err, raft.ErrCompacted) {
		return fmt.Errorf("compact log to %d: %w", compactTo, err)
	}
	return nil
}

// Kill is a process kill (SIGKILL): the OS keeps what was written, synced
// or not. The mirror is gone with the process; Open rebuilds it.
func (s *Store) Kill() {
	s.Synced()
	s.MemoryStorage = nil
}

// Crash is a power loss: what was synced survives, and of the writes since,
// a prefix drawn from rng (possibly none, possibly all). It returns how many
// batches were kept and lost.
func (s *Store) Crash(rng *rand.Rand) (kept, lost int) {
	kept = rng.IntN(len(s.pending) + 1)
	for _, b := range s.pending[:kept] {
		s.durable.apply(b)
	}
	lost = len(s.pending) - kept
	s.pending = s.pending[:0]
	s.MemoryStorage = nil
	return kept, lost
}

// Unsynced is the number of batches written since the last sync.
func (s *Store) Unsynced() int { return len(s.pending) }

func (d *diskState) apply(b batch) {
	for _, o := range b {
		switch o.kind {
		case opSetSnap:
			d.snap = o.snap
		case opSetHardState:
			d.hs = o.hs
		case opSetEntries:
			d.setEntries(o.ents)
		case opDeleteRange:
			i := d.search(o.lo)
			j := d.search(o.hi)
			d.ents = slices.Delete(d.ents, i, j)
		}
	}
}

// search is the position of the first stored entry with index >= i.
func (d *diskState) search(i uint64) int {
	n, _ := slices.BinarySearchFunc(d.ents, i, func(e *raftpb.Entry, i uint64) int {
		switch {
		case e.GetIndex() < i:
			return -1
		case e.GetIndex() > i:
			return 1
		}
		return 0
	})
	return n
}

// setEntries writes each entry under its index key, replacing what is there.
func (d *diskState) setEntries(ents []*raftpb.Entry) {
	for _, e := range ents {
		if n := len(d.ents); n == 0 || d.ents[n-1].GetIndex() < e.GetIndex() {
			d.ents = append(d.ents, e)
			continue
		}
		i := d.search(e.GetIndex())
		if i < len(d.ents) && d.ents[i].GetIndex() == e.GetIndex() {
			d.ents[i] = e
		} else {
			d.ents = slices.Insert(d.ents, i, e)
		}
	}
}

// DurableLog describes the durable state, for tests and the trace: the
// snapshot index, the stored entries' first and last index, and the hard
// state's term and commit.
func (s *Store) DurableLog() (snapIndex, first, last, term, commit uint64) {
	if s.durable.snap != nil {
		snapIndex = s.durable.snap.GetMetadata().GetIndex()
	}
	if n := len(s.durable.ents); n > 0 {
		first, last = s.durable.ents[0].GetIndex(), s.durable.ents[n-1].GetIndex()
	}
	return snapIndex, first, last, s.durable.hs.GetTerm(), s.durable.hs.GetCommit()
}

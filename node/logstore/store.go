// Package logstore is a member's raft log store: entries, hard state and
// snapshot in pebble, mirrored in a raft.MemoryStorage for raft's reads.
package logstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Store is what the node needs from its raft log store: raft's read
// interface plus the writes of the Ready loop and of log compaction. A
// simulator can supply an in-memory implementation.
type Store interface {
	raft.Storage
	// Save persists one Ready's hard state, entries and snapshot in one
	// atomic write, synced when sync is true. Entries must be readable
	// through raft.Storage once it returns.
	Save(hs *raftpb.HardState, entries []*raftpb.Entry, snap *raftpb.Snapshot, sync bool) error
	// Compact records a snapshot of the state machine at index (which must be
	// applied) and discards log entries before compactTo.
	Compact(index uint64, cs *raftpb.ConfState, data []byte, compactTo uint64) error
	Close() error
}

// Keys of the pebble layout. Entries sort by big-endian index.
var (
	keyHardState = []byte("h")
	keySnapshot  = []byte("s")
	keyEntryLow  = []byte("e")
	keyEntryHigh = []byte("f")
)

func entryKey(i uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'e'
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

// Disk keeps the raft log in pebble and mirrors the part since the
// last snapshot in a raft.MemoryStorage for reads. Every write goes to pebble
// first; the mirror is updated only after the (synced) commit returns, so
// raft never sees an entry as stable before it is durable.
type Disk struct {
	*raft.MemoryStorage
	db    *pebble.DB
	files snapFiles // snapshot data (snapfile.go)
	seq   atomic.Uint64
	mu    sync.Mutex // orders Save against Compact on the pebble side
	log   *slog.Logger
	// chain is the files holding the stored snapshot's data (empty for
	// data kept in pebble: the seed, and stores from before the files).
	chain chain
	stats *storeStats
	// fs and dir are where the store lives, for its clean-stop seal.
	fs     vfs.FS
	dir    string
	lock   *pebble.Lock // pebble's directory lock, taken before the scan
	opened OpenReport
	// mirrorBehind is set (under mu) when a write committed to pebble
	// but the mirror failed to follow: the mirror, which the seal is
	// built from, no longer says what pebble holds, so Close writes no
	// seal (it would make the next open refuse an intact store).
	mirrorBehind bool
}

var _ Store = (*Disk)(nil)

// Open opens (or creates) the log store in dir. A fresh store gets
// the initial configuration voters; an existing one keeps its own.
func Open(dir string, voters []uint64, log *slog.Logger) (*Disk, error) {
	return OpenFS(dir, vfs.Default, voters, log)
}

// OpenFS is Open on the filesystem fs: tests and a
// simulator pass pebble's crash-testing in-memory filesystem, which loses
// every write not yet synced.
func OpenFS(dir string, fs vfs.FS, voters []uint64, log *slog.Logger) (*Disk, error) {
	return OpenSeeded(dir, fs, InitialSnapshot(voters, nil), log)
}

// InitialSnapshot is the snapshot a fresh store starts from: index 0 with
// the bootstrap configuration voters, and data for the state machine (nil
// for an empty one).
func InitialSnapshot(voters []uint64, data []byte) *raftpb.Snapshot {
	return &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{
		ConfState: &raftpb.ConfState{Voters: voters},
		Index:     new(uint64(0)), Term: new(uint64(0)),
	}}
}

// OpenSeeded opens the log store in dir; a fresh one is seeded with
// initial (written synced before Open returns), which is how a member
// bootstraps, joins (the cluster's bootstrap configuration) or starts from
// a restored backup (a snapshot at the backup's index). A store with data
// keeps its own and ignores initial: a member never bootstraps twice.
func OpenSeeded(dir string, fs vfs.FS, initial *raftpb.Snapshot, log *slog.Logger) (*Disk, error) {
	return OpenWith(dir, fs, initial, log, Options{})
}

// Options are what a store may be opened with beside its place and seed.
type Options struct {
	// UnsafeTrustDamagedLog is the planted bug damaged-log-trusted: a
	// write-ahead log whose checksum fails in its middle is cut there, as
	// a torn tail, and the clean-stop seal is not checked, so the member
	// starts over what is left (damage.go).
	UnsafeTrustDamagedLog bool
}

// OpenReport is what opening the store found: the last index it loaded,
// and the write-ahead logs whose torn tail it dropped (or, with the
// planted bug, cut at their damage), "FILE@OFFSET".
type OpenReport struct {
	LastIndex uint64
	Sealed    bool // it had stopped cleanly (its seal matched)
	Dropped   []string
}

// Opened says what opening the store found.
func (s *Disk) Opened() OpenReport { return s.opened }

// OpenWith is OpenSeeded with options. A store whose data is damaged is
// refused with a *DamagedError naming the file (damage.go).
func OpenWith(dir string, fs vfs.FS, initial *raftpb.Snapshot, log *slog.Logger, o Options) (*Disk, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// pebble's directory lock first: the scan below must not read (or,
	// with the planted bug, cut) a log a running pebble is writing.
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", dir, err)
	}
	lock, err := pebble.LockDirectory(dir, fs)
	if err != nil {
		if inUse(err) {
			return nil, fmt.Errorf("data directory %s is in use by another process (another member running on it?)", dir)
		}
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	opened := false
	defer func() {
		if !opened {
			lock.Close()
		}
	}()
	sl, sealed, err := readSeal(fs, dir)
	if err != nil && !o.UnsafeTrustDamagedLog {
		return nil, err
	}
	sealed = sealed && !o.UnsafeTrustDamagedLog
	if sealed && staleSeal(fs, dir, sl) {
		// Another program (an older build, after a rollback) opened and
		// wrote the store after its clean stop: the seal says what it
		// held then, not now. It is removed with the check's.
		log.Warn("ignoring the clean-stop seal: the store was opened by another program after it was written",
			"file", sealName, "dir", dir)
		sealed = false
	}
	torn, err := checkWALs(fs, dir, o.UnsafeTrustDamagedLog)
	if err != nil {
		return nil, err
	}
	wals := walNames(fs, dir)
	rotate := formatBefore(fs, dir) < pebble.FormatWALSyncChunks
	st := new(storeStats)
	listener := st.listener()
	// pebble's default for a checksum that fails in an sstable it reads
	// (a compaction, an iterator) is its logger's Fatalf: a panic on a
	// background goroutine, which nothing can recover. The store keeps
	// the first instead, and every later write fails with it, so the
	// member stops refusing to go on; a read at open returns its error.
	listener.DataCorruption = func(info pebble.DataCorruptionInfo) {
		file := info.Path
		if rel, ok := strings.CutPrefix(file, dir); ok {
			file = strings.TrimLeft(rel, "/")
		}
		st.damage.CompareAndSwap(nil, &DamagedError{Dir: dir, File: file, Err: info.Details, Running: true})
		log.Error("pebble found its data damaged", "file", info.Path, "err", info.Details)
	}
	db, err := openPebble(dir, &pebble.Options{
		FS:            fs,
		Logger:        pebbleLogger{log},
		EventListener: listener,
		// A large memtable lets most log entries be deleted by a compaction
		// (snapshot) while still in memory, so they never reach an sstable:
		// with the 4 MiB default, flushes and L0 compactions of entries that
		// were about to be deleted took the CPU the commit path needed.
		MemTableSize: 64 << 20,
		// Every WAL chunk carries the offset the log was synced to when
		// it was written, so a record that fails its checksum with synced
		// records after it is corruption, not a torn tail (damage.go).
		// Opening an older store upgrades it (one way: pebble before
		// v2.1 cannot open it after).
		FormatMajorVersion: pebble.FormatWALSyncChunks,
		Lock:               lock,
	})
	var de *DamagedError
	if errors.As(err, &de) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open pebble at %s: %w", dir, err)
	}
	s := &Disk{MemoryStorage: raft.NewMemoryStorage(), db: db, files: snapFiles{fs: fs, dir: fs.PathJoin(dir, snapDir)}, log: log, stats: st,
		fs: fs, dir: dir, lock: lock}
	if err := s.loadChecked(initial, sealed, sl, wals); err != nil {
		db.Close()
		if errors.As(err, &de) {
			return nil, err
		}
		return nil, fmt.Errorf("load raft log from %s: %w", dir, err)
	}
	if rotate {
		// The log pebble opened was created before the format that
		// writes sync offsets (a fresh store's first log, or a store
		// from before it): a flush starts a new one that has them.
		if err := db.Flush(); err != nil {
			db.Close()
			return nil, fmt.Errorf("start a write-ahead log with sync offsets in %s: %w", dir, err)
		}
	}
	s.opened.Sealed = sealed
	for _, d := range torn {
		s.opened.Dropped = append(s.opened.Dropped, fmt.Sprintf("%s@%d", d.file, d.offset))
		if d.truncated {
			log.Warn("write-ahead log cut at its damage and trusted (planted bug damaged-log-trusted)", "file", d.file, "offset", d.offset, "err", d.err)
		} else {
			log.Info("write-ahead log ends in a torn write, dropped as pebble recovers it", "file", d.file, "offset", d.offset)
		}
	}
	s.opened.LastIndex, _ = s.MemoryStorage.LastIndex()
	opened = true
	return s, nil
}

// inUse says whether err is pebble's directory lock held by another
// process (or this one): say so, not "resource temporarily unavailable".
func inUse(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) ||
		strings.Contains(err.Error(), "lock held by current process")
}

// loadCheckError is a check of the stored data that load made and that
// failed (a log gap, an entry that does not decode, a snapshot file
// missing): on a sealed store, data damaged since its clean stop.
type loadCheckError struct{ err error }

func (e *loadCheckError) Error() string { return e.err.Error() }
func (e *loadCheckError) Unwrap() error { return e.err }

// checkFailed marks err, if any, as a failed check of the stored data.
func checkFailed(err error) error {
	if err == nil {
		return nil
	}
	return &loadCheckError{err}
}

// loadChecked loads the store, then compares it with the seal of its
// last clean stop (if it had one) and removes the seal, durably, before
// anything new is written. A panic while reading damaged data is a
// refusal.
func (s *Disk) loadChecked(initial *raftpb.Snapshot, sealed bool, sl seal, wals []string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &DamagedError{Dir: s.dir, Err: fmt.Errorf("reading the raft log failed: %v", r)}
		}
		var de *DamagedError
		var lc *loadCheckError
		if err != nil && !errors.As(err, &de) {
			if d := s.stats.damage.Load(); d != nil {
				atOpen := *d
				atOpen.Running = false
				err = &atOpen
			} else if isCorruption(err) || (sealed && errors.As(err, &lc)) {
				// A sealed store loaded whole at its clean stop: a check
				// of the load that fails now (a snapshot file gone, a log
				// gap) failed on data damaged since. Any other error (the
				// file system's) is returned as it is.
				file := corruptFile(s.fs, s.dir, err)
				if file == "" && sealed {
					// What the log and the MANIFEST say is what went.
					file = strings.Join(append(slices.Clone(wals), manifestNames(s.fs, s.dir)...), ", ")
				}
				err = &DamagedError{Dir: s.dir, File: file, Err: err}
			}
		}
	}()
	if sealed {
		// A sealed store is never fresh: seeding it would hide that its
		// data went.
		if found, err := s.has(keySnapshot); err != nil {
			return err
		} else if !found {
			return &DamagedError{Dir: s.dir, File: strings.Join(manifestNames(s.fs, s.dir), ", "), Err: errors.New("it stopped cleanly holding a raft log, and pebble now finds none")}
		}
	}
	if err := s.load(initial); err != nil {
		return err
	}
	// Every sstable's blocks, read once: the load reads only the live
	// keys, and a block of dead ones that fails its checksum would stop
	// the member at the compaction that first reads it, mid-run, rather
	// than now (pebble checks no checksum of a block it does not read).
	if err := s.db.CheckLevels(nil); err != nil {
		return &DamagedError{Dir: s.dir, File: corruptFile(s.fs, s.dir, err), Err: fmt.Errorf("checking its sstables: %w", err)}
	}
	if sealed {
		if err := s.checkSeal(s.dir, sl, wals); err != nil {
			return err
		}
	}
	// Snapshot files the stored snapshot does not name go only now: a
	// store refused above keeps every file it had, for its operator.
	if err := s.files.removeExcept(s.chain); err != nil {
		return err
	}
	if err := removeSeal(s.fs, s.dir); err != nil {
		return fmt.Errorf("remove the clean-stop seal: %w", err)
	}
	return nil
}

// has says whether key is stored.
func (s *Disk) has(key []byte) (bool, error) {
	_, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	closer.Close()
	return true, nil
}

// isCorruption says whether err is pebble's corruption, or a snapshot
// file that does not match its reference.
func isCorruption(err error) bool {
	return pebble.IsCorruptionError(err)
}

func (s *Disk) load(initial *raftpb.Snapshot) error {
	snap := &raftpb.Snapshot{}
	found, err := s.getProto(keySnapshot, snap)
	if err != nil {
		return err
	}
	if !found {
		// Every member of a bootstrap starts from the same configuration at
		// index 0, so no configuration entries are needed to bootstrap.
		snap = initial
		if err := s.seed(initial); err != nil {
			return fmt.Errorf("write initial configuration: %w", err)
		}
	}
	if isStoredRef(snap.GetData()) {
		// The mirror keeps the reference: the data is read when it is
		// needed (SnapshotData, OpenSnapshot), not held for the life of
		// the process.
		c, err := parseRef(snap.GetData())
		if err != nil {
			return checkFailed(fmt.Errorf("snapshot at %d: %w", snap.GetMetadata().GetIndex(), err))
		}
		for _, p := range c.parts {
			if _, err := s.files.fs.Stat(s.files.path(p.name)); errors.Is(err, os.ErrNotExist) {
				return checkFailed(fmt.Errorf("snapshot at %d: %w", snap.GetMetadata().GetIndex(), err))
			} else if err != nil {
				return fmt.Errorf("snapshot at %d: %w", snap.GetMetadata().GetIndex(), err)
			}
		}
		s.chain = c
	}
	// New files' names must differ from the kept ones' whatever their
	// index: the counter goes on from the highest kept.
	for _, p := range s.chain.parts {
		var index, seq uint64
		if _, err := fmt.Sscanf(p.name, "%d-%d"+snapSuffix, &index, &seq); err == nil && seq > s.seq.Load() {
			s.seq.Store(seq)
		}
	}
	hs := &raftpb.HardState{}
	if found, err := s.getProto(keyHardState, hs); err != nil {
		return err
	} else if found {
		if err := s.MemoryStorage.SetHardState(hs); err != nil {
			return err
		}
	}
	// A member's term is never below the term of its snapshot: a member at
	// term 0 over a log of term 7 would lead a term lower than its own log
	// and append entries whose terms go backwards.
	if snapTerm := snap.GetMetadata().GetTerm(); hs.GetTerm() < snapTerm {
		return checkFailed(fmt.Errorf("hard state term %d is below the snapshot's term %d: the store was not written by a complete seed or restore", hs.GetTerm(), snapTerm))
	}
	ents, err := s.storedEntries()
	if err != nil {
		return err
	}
	return checkFailed(s.mirror(snap, ents))
}

// seed writes the initial snapshot of a fresh store and, for a snapshot
// past index 0 (a restored backup), the hard state that commits it, in one
// synced batch: a crash leaves either an empty store or a whole seed.
func (s *Disk) seed(initial *raftpb.Snapshot) error {
	b := s.db.NewBatch()
	defer b.Close()
	data, err := proto.Marshal(initial)
	if err != nil {
		return err
	}
	if err := b.Set(keySnapshot, data, nil); err != nil {
		return err
	}
	if md := initial.GetMetadata(); md.GetIndex() > 0 {
		hs, err := proto.Marshal(&raftpb.HardState{Term: new(md.GetTerm()), Commit: new(md.GetIndex())})
		if err != nil {
			return err
		}
		if err := b.Set(keyHardState, hs, nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

// storedEntries reads every log entry in pebble, checking they are
// contiguous.
func (s *Disk) storedEntries() ([]*raftpb.Entry, error) {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: keyEntryLow, UpperBound: keyEntryHigh})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var ents []*raftpb.Entry
	for iter.First(); iter.Valid(); iter.Next() {
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(iter.Value(), e); err != nil {
			return nil, checkFailed(fmt.Errorf("entry %x: %w", iter.Key(), err))
		}
		if n := len(ents); n > 0 && e.GetIndex() != ents[n-1].GetIndex()+1 {
			return nil, checkFailed(fmt.Errorf("log gap: entry %d after %d", e.GetIndex(), ents[n-1].GetIndex()))
		}
		ents = append(ents, e)
	}
	return ents, iter.Error()
}

// mirror loads the snapshot and the stored entries into the in-memory log.
func (s *Disk) mirror(snap *raftpb.Snapshot, ents []*raftpb.Entry) error {
	return Load(s.MemoryStorage, snap, ents)
}

// Load rebuilds an in-memory raft log from a stored snapshot and entries,
// as a store does when it opens (the simulator's store too).
// Entries at and below the snapshot index are the ones Compact kept for
// slow followers: they stay readable, as they were before the restart.
func Load(ms *raft.MemoryStorage, snap *raftpb.Snapshot, ents []*raftpb.Entry) error {
	index, term := snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
	if len(ents) > 0 && ents[0].GetIndex() < index && ents[len(ents)-1].GetIndex() >= index {
		if got := ents[index-ents[0].GetIndex()].GetTerm(); got != term {
			return fmt.Errorf("stored entry %d has term %d, the snapshot at it term %d", index, got, term)
		}
		// The first kept entry becomes the log's base, then the snapshot
		// is recorded at its own index on top of the loaded entries.
		base := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
			Index: new(ents[0].GetIndex()), Term: new(ents[0].GetTerm()), ConfState: snap.GetMetadata().GetConfState()}}
		if err := ms.ApplySnapshot(base); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
			return fmt.Errorf("load log base %d: %w", ents[0].GetIndex(), err)
		}
		if err := ms.Append(ents[1:]); err != nil {
			return err
		}
		if _, err := ms.CreateSnapshot(index, snap.GetMetadata().GetConfState(), snap.GetData()); err != nil {
			return fmt.Errorf("load snapshot at %d: %w", index, err)
		}
		return nil
	}
	if err := ms.ApplySnapshot(snap); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
		return fmt.Errorf("load snapshot: %w", err)
	}
	for len(ents) > 0 && ents[0].GetIndex() <= index {
		ents = ents[1:] // covered by the snapshot
	}
	if len(ents) > 0 && ents[0].GetIndex() != index+1 {
		return fmt.Errorf("log gap: first entry %d after a snapshot at %d", ents[0].GetIndex(), index)
	}
	return ms.Append(ents)
}

func (s *Disk) getProto(key []byte, m proto.Message) (bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	if err := proto.Unmarshal(v, m); err != nil {
		return false, checkFailed(fmt.Errorf("decode %q: %w", key, err))
	}
	return true, nil
}

// Save implements Store. A received snapshot's data goes to a file of its
// own first (snapfile.go); the batch stores the reference to it.
func (s *Disk) Save(hs *raftpb.HardState, entries []*raftpb.Entry, snap *raftpb.Snapshot, sync bool) error {
	if d := s.stats.damage.Load(); d != nil {
		// pebble found its data damaged: nothing more is written over it.
		return d
	}
	received := snap != nil && !raft.IsEmptySnap(snap)
	var file string
	var ref []byte
	if received {
		var err error
		if file, ref, err = s.files.write(snap.GetMetadata().GetIndex(), s.seq.Add(1), snap.GetData()); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	committed, err := s.save(hs, entries, snap, ref, sync)
	if committed && err != nil {
		s.mirrorBehind = true
	}
	if received && committed && !s.chain.has(file) {
		// Once the batch committed, pebble names the new file (even if
		// the mirror then failed): the old ones go, the new one stays.
		next, _ := parseRef(ref) // encoded just above
		s.files.removeReplaced(s.chain, next)
		s.chain = next
	}
	if err != nil && !committed {
		s.files.remove(file)
	}
	return err
}

// save writes one Ready in one pebble batch and mirrors it; pebble gets
// ref in place of snap's data. committed says whether the batch reached
// pebble (the mirror may still have failed). The caller holds s.mu.
func (s *Disk) save(hs *raftpb.HardState, entries []*raftpb.Entry, snap *raftpb.Snapshot, ref []byte, sync bool) (committed bool, err error) {
	b := s.db.NewBatch()
	defer b.Close()
	if snap != nil && !raft.IsEmptySnap(snap) {
		data, err := proto.Marshal(&raftpb.Snapshot{Metadata: snap.GetMetadata(), Data: ref})
		if err != nil {
			return false, err
		}
		b.Set(keySnapshot, data, nil)
		// A received snapshot replaces the whole log, entries above its
		// index included: they may come from a term the leader overwrote.
		// Entries in this same batch are set after the deletion and stay.
		b.DeleteRange(keyEntryLow, keyEntryHigh, nil)
	}
	if len(entries) > 0 {
		for _, e := range entries {
			data, err := proto.Marshal(e)
			if err != nil {
				return false, err
			}
			b.Set(entryKey(e.GetIndex()), data, nil)
		}
		// An append that overwrites part of the log truncates the conflicting
		// suffix after it. Only then: a range tombstone per append would make
		// every memtable flush fragment thousands of them.
		last := entries[len(entries)-1].GetIndex()
		if stored, err := s.MemoryStorage.LastIndex(); err == nil && stored > last && raft.IsEmptySnap(snap) {
			b.DeleteRange(entryKey(last+1), entryKey(stored+1), nil)
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		data, err := proto.Marshal(hs)
		if err != nil {
			return false, err
		}
		b.Set(keyHardState, data, nil)
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	if err := b.Commit(opts); err != nil {
		return false, fmt.Errorf("commit raft batch: %w", err)
	}
	if snap != nil && !raft.IsEmptySnap(snap) {
		if err := s.MemoryStorage.ApplySnapshot(&raftpb.Snapshot{Metadata: snap.GetMetadata(), Data: ref}); err != nil {
			return true, fmt.Errorf("install snapshot: %w", err)
		}
	}
	if err := s.MemoryStorage.Append(entries); err != nil {
		return true, fmt.Errorf("append to log mirror: %w", err)
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		return true, s.MemoryStorage.SetHardState(hs)
	}
	return true, nil
}

// Compact implements Store. It may run on another goroutine than Save:
// the data's file is written beside the Ready loop's commits, and only the
// small batch that records it and drops the log waits for them. The data
// is kept as it is, in one file (SnapshotData returns it), so nothing is
// appended to it: the next CompactFrom writes a new base.
func (s *Disk) Compact(index uint64, cs *raftpb.ConfState, data []byte, compactTo uint64) error {
	if cur, err := s.MemoryStorage.Snapshot(); err == nil && cur.GetMetadata().GetIndex() >= index {
		return nil // a newer snapshot is stored already (one received)
	}
	_, ref, err := s.files.write(index, s.seq.Add(1), data)
	if err != nil {
		return err
	}
	next, _ := parseRef(ref) // encoded just above
	return s.store(index, cs, next, compactTo)
}

// Compaction is a snapshot for CompactFrom to store.
type Compaction struct {
	Index     uint64 // applied: the snapshot's index
	ConfState *raftpb.ConfState
	CompactTo uint64 // the log before it is dropped
	Rate      int64  // bytes per second at most; 0: unpaced
	// Write streams the whole snapshot's data.
	Write func(io.Writer) error
	// WriteDelta, when set, streams what changed since the snapshot at
	// DeltaBase instead. The store appends it to its chain if that chain
	// is its own, ends at DeltaBase, and stays under MaxParts parts and
	// MaxDeltaBytes bytes of deltas with it; otherwise it writes a new
	// base with Write.
	WriteDelta    func(io.Writer) error
	DeltaBase     uint64
	MaxDeltaBytes uint64
	MaxParts      int
}

// CompactFrom is Compact with the snapshot's data streamed into its file,
// never held whole in memory: the whole table, or only what changed since
// the last snapshot (Compaction.WriteDelta). When ctx ends first nothing
// is stored and the log is left whole.
func (s *Disk) CompactFrom(ctx context.Context, c Compaction) error {
	if cur, err := s.MemoryStorage.Snapshot(); err == nil && cur.GetMetadata().GetIndex() >= c.Index {
		return nil // a newer snapshot is stored already (one received)
	}
	s.mu.Lock()
	prev := s.chain
	s.mu.Unlock()
	write := c.Write
	if c.WriteDelta != nil && prev.own && !prev.empty() && prev.last().index == c.DeltaBase &&
		len(prev.parts) < c.MaxParts && prev.deltaBytes() < c.MaxDeltaBytes {
		write = c.WriteDelta
	} else {
		prev = chain{} // a new base
	}
	next, err := s.files.appendPart(ctx, prev, c.Index, s.seq.Add(1), c.Rate, write)
	if errors.Is(err, errChainHash) {
		s.log.Warn("writing a new snapshot base: the chain's hash does not resume", "err", err)
		next, err = s.files.appendPart(ctx, chain{}, c.Index, s.seq.Add(1), c.Rate, c.Write)
	}
	if err != nil {
		return err
	}
	return s.store(c.Index, c.ConfState, next, c.CompactTo)
}

// store records the snapshot whose files next names, unless a newer one
// is stored, or next is a delta on a chain that was replaced meanwhile
// (by a snapshot received from the leader, which is newer); its new file
// goes if it is not kept.
func (s *Disk) store(index uint64, cs *raftpb.ConfState, next chain, compactTo uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	file := next.last().name
	if n := len(next.parts); n > 1 && !s.chain.has(next.parts[n-2].name) {
		s.files.remove(file)
		return nil
	}
	err := s.compact(index, cs, next, compactTo)
	if !s.chain.has(file) {
		s.files.remove(file) // not referenced: out of date, or not committed
	}
	return err
}

// compact records the snapshot at index, its data in the files of next,
// and drops the log before compactTo. The caller holds s.mu; on success
// s.chain is next, and the files next does not keep are gone. A snapshot
// that is out of date (a newer one arrived meanwhile) leaves everything
// as it was and s.chain unchanged.
func (s *Disk) compact(index uint64, cs *raftpb.ConfState, next chain, compactTo uint64) error {
	snap, err := s.MemoryStorage.CreateSnapshot(index, cs, next.ref())
	if errors.Is(err, raft.ErrSnapOutOfDate) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create snapshot at %d: %w", index, err)
	}
	enc, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	b.Set(keySnapshot, enc, nil)
	// The log's base (the entry before the first readable one) must be a
	// stored entry, or a restart would start the log one entry later than
	// it was: after a snapshot install the base is the snapshot itself, so
	// compact past it.
	if first, err := s.MemoryStorage.FirstIndex(); err == nil && compactTo < first {
		compactTo = first
	}
	if compactTo > index {
		compactTo = index
	}
	b.DeleteRange(keyEntryLow, entryKey(compactTo), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("persist snapshot at %d: %w", index, err)
	}
	s.files.removeReplaced(s.chain, next)
	s.chain = next
	if err := s.MemoryStorage.Compact(compactTo); err != nil && !errors.Is(err, raft.ErrCompacted) {
		s.mirrorBehind = true
		return fmt.Errorf("compact log to %d: %w", compactTo, err)
	}
	return nil
}

// Close closes the pebble store. It is a clean stop: pebble's log is
// synced, then the seal that says what the store holds is written and
// synced, so the next open can tell a log damaged or truncated meanwhile
// (damage.go). A store that cannot sync is closed without a seal, as a
// crash leaves it.
func (s *Disk) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	if s.stats.closed {
		return s.db.Close()
	}
	if s.fs != nil {
		if s.mirrorBehind {
			s.log.Warn("closing without a clean-stop seal: a write committed but its mirror failed, so the mirror does not say what pebble holds")
		} else if err := s.db.LogData(nil, pebble.Sync); err != nil {
			s.log.Warn("closing without a clean-stop seal: the log did not sync", "err", err)
		} else if sl, err := s.sealNow(); err == nil {
			// The files now, under the lock: a higher one at the next
			// open means another program opened the store meanwhile.
			sl.walNum, sl.manifestNum = fileNums(s.fs, s.dir)
			if err := writeSeal(s.fs, s.dir, sl); err != nil {
				s.log.Warn("closing without a clean-stop seal", "err", err)
			}
		}
	}
	s.stats.closed = true
	err := s.db.Close()
	if s.lock != nil {
		if lerr := s.lock.Close(); err == nil {
			err = lerr
		}
	}
	return err
}

// pebbleLogger routes pebble's chatter into slog at debug level.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...))
}

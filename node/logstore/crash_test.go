package logstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/raftlock/raftlock/internal/snapchain"
	"github.com/raftlock/raftlock/member"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// logModel is what the raft log store must hold: the snapshot, the terms of
// the stored entries, and the hard state.
type logModel struct {
	snapIndex, snapTerm uint64
	first, last         uint64 // stored entries first..last (first-1 is the snapshot or a kept base)
	terms               map[uint64]uint64
	term, commit        uint64
	// data is the snapshot's; parts, the parts of the chain holding it
	// when the store wrote it as its own chain (nil otherwise).
	data  []byte
	parts [][]byte
}

func (m logModel) clone() logModel {
	m.terms = maps.Clone(m.terms)
	m.parts = slices.Clone(m.parts)
	return m
}

// TestDiskStorageSurvivesPowerLossAtAnyPoint drives the store through the
// writes the Ready loop and log compaction make (synced appends, some of
// them overwriting an uncommitted suffix; unsynced commit-only hard states;
// compactions; snapshot installs) on pebble's crash-testing filesystem, and
// at random points takes a copy of the disk as a power cut would leave it
// (every synced write, a random share of the rest). Every copy must reopen,
// be accepted by raft, and hold exactly the log of the last synced write.
func TestDiskStorageSurvivesPowerLossAtAnyPoint(t *testing.T) {
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	quiet := slog.New(slog.DiscardHandler)
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		fs := vfs.NewCrashableMem()
		s, err := OpenFS("/data", fs, []uint64{1, 2, 3}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		m := logModel{first: 1, terms: map[uint64]uint64{}, term: 1}
		durable := m.clone()
		hs := func() *raftpb.HardState {
			return &raftpb.HardState{Term: new(m.term), Commit: new(m.commit), Vote: new(uint64(1))}
		}
		crashes := 0
		for step := range 250 {
			switch op := rng.IntN(10); {
			case op < 5: // append, sometimes overwriting the uncommitted suffix in a new term
				from := m.last + 1
				if rng.IntN(5) == 0 {
					m.term++
					floor := max(m.commit, m.snapIndex, m.first-1)
					if m.last > floor {
						from = floor + 1 + rng.Uint64N(m.last-floor)
					}
				}
				n := 1 + rng.Uint64N(8)
				es := ents(m.term, from, from+n-1)
				for i := from; i <= m.last; i++ {
					delete(m.terms, i)
				}
				for _, e := range es {
					m.terms[e.GetIndex()] = m.term
				}
				m.last = from + n - 1
				if err := s.Save(hs(), es, nil, true); err != nil {
					t.Fatalf("seed %d step %d: append: %v", seed, step, err)
				}
				durable = m.clone()
			case op < 8: // commit moves: an unsynced hard state
				if m.commit < m.last {
					m.commit += 1 + rng.Uint64N(m.last-m.commit)
					if err := s.Save(hs(), nil, nil, false); err != nil {
						t.Fatalf("seed %d step %d: commit: %v", seed, step, err)
					}
				}
			case op < 9: // the apply loop snapshots at the applied (= committed) index
				if m.commit > m.snapIndex {
					idx := m.commit
					compactTo := min(idx, max(1, idx-rng.Uint64N(6), m.first))
					if rng.IntN(3) == 0 {
						m.data, m.parts = []byte(fmt.Sprintf("table@%d", idx)), nil
						if err := s.Compact(idx, cs, m.data, compactTo); err != nil {
							t.Fatalf("seed %d step %d: compact: %v", seed, step, err)
						}
					} else {
						// A chain: a delta when the store's own chain ends at
						// the base the caller names (now and then a stale one)
						// and is under MaxParts, else a new base.
						c := Compaction{Index: idx, ConfState: cs, CompactTo: compactTo, MaxParts: 2 + rng.IntN(4), MaxDeltaBytes: 1 << 20,
							Write:      writeString(fmt.Sprintf("base@%d", idx)),
							WriteDelta: writeString(fmt.Sprintf("delta@%d", idx)), DeltaBase: m.snapIndex}
						if rng.IntN(8) == 0 {
							c.DeltaBase--
						}
						if m.parts != nil && c.DeltaBase == m.snapIndex && len(m.parts) < c.MaxParts {
							m.parts = append(m.parts, []byte(fmt.Sprintf("delta@%d", idx)))
						} else {
							m.parts = [][]byte{[]byte(fmt.Sprintf("base@%d", idx))}
						}
						m.data = snapchain.Join(m.parts...)
						if err := s.CompactFrom(context.Background(), c); err != nil {
							t.Fatalf("seed %d step %d: compact from: %v", seed, step, err)
						}
					}
					m.snapIndex, m.snapTerm = idx, m.terms[idx]
					if compactTo+1 > m.first {
						for i := m.first; i < compactTo; i++ {
							delete(m.terms, i)
						}
						m.first = compactTo + 1
					}
					durable = m.clone()
				}
			default: // a snapshot from the leader, of a log this member does not have
				// (a new term), ending past its commit and possibly before
				// its last entry: the stale suffix must go too.
				floor := max(m.commit, m.snapIndex)
				idx := floor + 1 + rng.Uint64N(m.last-floor+5)
				m.term++
				snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(idx), Term: new(m.term), ConfState: cs},
					Data: []byte(fmt.Sprintf("table@%d", idx))}
				m.snapIndex, m.snapTerm, m.commit = idx, m.term, idx
				m.first, m.last, m.terms = idx+1, idx, map[uint64]uint64{}
				m.data, m.parts = snap.GetData(), nil
				if err := s.Save(hs(), nil, snap, true); err != nil {
					t.Fatalf("seed %d step %d: install: %v", seed, step, err)
				}
				durable = m.clone()
			}
			if names, _ := fs.List("/data/" + snapDir); m.snapIndex > 0 && len(names) != max(1, len(m.parts)) {
				t.Fatalf("seed %d step %d: snapshot folder holds %v, want %d files", seed, step, names, max(1, len(m.parts)))
			}
			if f, _ := s.FirstIndex(); f != m.first {
				t.Fatalf("seed %d step %d: live first %d, model %d (snap %d)", seed, step, f, m.first, m.snapIndex)
			}
			if rng.IntN(4) != 0 {
				continue
			}
			crashes++
			disk := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
			checkRecovered(t, fmt.Sprintf("seed %d step %d", seed, step), disk, durable, m.commit)
		}
		s.Close()
		if crashes == 0 {
			t.Fatalf("seed %d: no crash taken", seed)
		}
	}
}

// checkRecovered reopens a crashed disk and compares it with the state of
// the last synced write; the commit index may be any value from that write's
// to the latest one (commit-only changes are not synced).
func checkRecovered(t *testing.T, at string, disk *vfs.MemFS, want logModel, latestCommit uint64) {
	t.Helper()
	s, err := OpenFS("/data", disk, []uint64{1, 2, 3}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("%s: reopen after a power cut: %v", at, err)
	}
	defer s.Close()
	snap, _ := s.Snapshot()
	if got := snap.GetMetadata().GetIndex(); got != want.snapIndex {
		t.Fatalf("%s: snapshot at %d after a power cut, want %d", at, got, want.snapIndex)
	}
	if want.snapIndex > 0 {
		// Its data survives whole with it: the file is synced and in place
		// before the reference to it commits.
		data, err := s.SnapshotData(snap.GetData())
		if err != nil || !bytes.Equal(data, want.data) {
			t.Fatalf("%s: snapshot data after a power cut: %q, %v; want %q", at, data, err, want.data)
		}
		// Its files are all the store keeps: a replaced chain's and a
		// write's the cut interrupted are gone.
		names, _ := disk.List("/data/" + snapDir)
		if n, want := len(names), max(1, len(want.parts)); n != want {
			t.Fatalf("%s: snapshot folder holds %v, want %d files", at, names, want)
		}
		// And streams as it reads, with its SHA-256.
		r, size, sum, _, err := s.OpenSnapshot(snap.GetData())
		if err != nil {
			t.Fatalf("%s: open the snapshot to send: %v", at, err)
		}
		sent, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(sent, want.data) || size != int64(len(sent)) || sum != sha256.Sum256(sent) {
			t.Fatalf("%s: snapshot streams %q (size %d, %v), want %q with its SHA-256", at, sent, size, err, want.data)
		}
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != want.first || last != want.last {
		t.Fatalf("%s: log %d..%d after a power cut, want %d..%d", at, first, last, want.first, want.last)
	}
	for i := first; i <= last; i++ {
		if term, err := s.Term(i); err != nil || term != want.terms[i] {
			t.Fatalf("%s: entry %d has term %d (%v), want %d", at, i, term, err, want.terms[i])
		}
	}
	hs, _, _ := s.InitialState()
	if hs.GetCommit() < want.commit || hs.GetCommit() > latestCommit {
		t.Fatalf("%s: commit %d after a power cut, want %d..%d", at, hs.GetCommit(), want.commit, latestCommit)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: raft refuses the recovered state: %v", at, r)
			}
		}()
		if _, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: s,
			Applied: snap.GetMetadata().GetIndex(), MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256,
			Logger: member.RaftLogger{Log: slog.New(slog.DiscardHandler)}}); err != nil {
			t.Fatalf("%s: raft refuses the recovered state: %v", at, err)
		}
	}()
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

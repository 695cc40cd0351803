package logstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/raftlock/raftlock/internal/snapchain"
)

// chainStore opens a one-voter store on fs holding entries 1..n.
func chainStore(t *testing.T, fs vfs.FS, n uint64) *Disk {
	t.Helper()
	s, err := OpenFS("/data", fs, []uint64{1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(&raftpb.HardState{Term: new(uint64(1)), Commit: new(n)}, ents(1, 1, n), nil, true); err != nil {
		t.Fatal(err)
	}
	return s
}

// compaction is a snapshot at idx whose delta, if the store takes it,
// starts at base.
func compaction(idx, base uint64, maxParts int) Compaction {
	return Compaction{Index: idx, ConfState: &raftpb.ConfState{Voters: []uint64{1}}, CompactTo: 1, MaxParts: maxParts, MaxDeltaBytes: 1 << 20,
		Write: writeString(fmt.Sprintf("base@%d", idx)), WriteDelta: writeString(fmt.Sprintf("delta@%d", idx)), DeltaBase: base}
}

// A power cut before any file operation of a chain's life (a base, deltas,
// a new base when the chain is full, a snapshot received from the leader,
// a new base after it) leaves a store that reopens with the snapshot of
// the step before or of the step itself, whole, its folder holding exactly
// its files.
func TestSnapshotChainSurvivesPowerLossBeforeEveryFileOperation(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		mem := vfs.NewCrashableMem()
		rng := rand.New(rand.NewPCG(seed, 2))
		var cuts []*vfs.MemFS
		armed := false
		fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(errorfs.Op) error {
			if armed {
				cuts = append(cuts, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}))
			}
			return nil
		}))
		s := chainStore(t, fs, 8)
		compact := func(c Compaction) func() error {
			return func() error { return s.CompactFrom(context.Background(), c) }
		}
		steps := []struct {
			name string
			do   func() error
			want []byte
		}{
			{"base@2", compact(compaction(2, 0, 10)), snapchain.Join([]byte("base@2"))},
			{"delta@3", compact(compaction(3, 2, 10)), snapchain.Join([]byte("base@2"), []byte("delta@3"))},
			{"delta@4", compact(compaction(4, 3, 10)), snapchain.Join([]byte("base@2"), []byte("delta@3"), []byte("delta@4"))},
			{"base@5, the chain full", compact(compaction(5, 4, 3)), snapchain.Join([]byte("base@5"))},
			{"delta@6", compact(compaction(6, 5, 10)), snapchain.Join([]byte("base@5"), []byte("delta@6"))},
			{"received@20", func() error {
				snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(20)), Term: new(uint64(2)),
					ConfState: &raftpb.ConfState{Voters: []uint64{1}}}, Data: []byte("table@20")}
				return s.Save(&raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(22))}, ents(2, 21, 22), snap, true)
			}, []byte("table@20")},
			{"base@21, not a delta on a received snapshot", compact(compaction(21, 20, 10)), snapchain.Join([]byte("base@21"))},
			{"delta@22", compact(compaction(22, 21, 10)), snapchain.Join([]byte("base@21"), []byte("delta@22"))},
		}
		var prev []byte
		for _, st := range steps {
			cuts, armed = cuts[:0], true
			if err := st.do(); err != nil {
				t.Fatalf("seed %d %s: %v", seed, st.name, err)
			}
			armed = false
			for i, disk := range cuts {
				at := fmt.Sprintf("seed %d %s, cut %d of %d", seed, st.name, i+1, len(cuts))
				r, err := OpenFS("/data", disk, []uint64{1}, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatalf("%s: reopen: %v", at, err)
				}
				snap, _ := r.Snapshot()
				data, err := r.SnapshotData(snap.GetData())
				if err != nil || !(bytes.Equal(data, prev) || bytes.Equal(data, st.want)) {
					t.Fatalf("%s: snapshot data %q (%v), want %q or %q", at, data, err, prev, st.want)
				}
				if names, _ := disk.List("/data/" + snapDir); prev != nil && len(names) != len(r.chain.parts) {
					t.Fatalf("%s: snapshot folder holds %v, the chain %d files", at, names, len(r.chain.parts))
				}
				r.Close()
			}
			if len(cuts) == 0 {
				t.Fatalf("seed %d %s: no file operation to cut before", seed, st.name)
			}
			prev = st.want
		}
		s.Close()
	}
}

// A chain streams as it reads, whatever the reader's buffer: an empty
// Read in the middle of a part skips nothing.
func TestSnapshotChainStreamsWhateverTheBuffer(t *testing.T) {
	s := chainStore(t, vfs.NewMem(), 4)
	defer s.Close()
	for _, c := range []Compaction{compaction(2, 0, 10), compaction(3, 2, 10), compaction(4, 3, 10)} {
		if err := s.CompactFrom(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	snap, _ := s.Snapshot()
	want, err := s.SnapshotData(snap.GetData())
	if err != nil || !bytes.Equal(want, snapchain.Join([]byte("base@2"), []byte("delta@3"), []byte("delta@4"))) {
		t.Fatalf("snapshot data %q, %v", want, err)
	}
	for _, size := range []int{1, 3, 64 << 10} {
		r, n, _, _, err := s.OpenSnapshot(snap.GetData())
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		buf := make([]byte, size)
		for {
			if k, err := r.Read(buf[:0]); k != 0 || (err != nil && err != io.EOF) {
				t.Fatalf("empty read: %d, %v", k, err)
			}
			k, err := r.Read(buf)
			got.Write(buf[:k])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		r.Close()
		if !bytes.Equal(got.Bytes(), want) || n != int64(len(want)) {
			t.Fatalf("%d-byte reads: streamed %q (size %d), want %q", size, got.Bytes(), n, want)
		}
	}
}

// A chain whose saved hash state does not resume gets a new base, not an
// error that would stop the member at every snapshot.
func TestSnapshotChainWithAnUnusableHashGetsANewBase(t *testing.T) {
	s := chainStore(t, vfs.NewMem(), 4)
	defer s.Close()
	if err := s.CompactFrom(context.Background(), compaction(2, 0, 10)); err != nil {
		t.Fatal(err)
	}
	s.chain.state = []byte("not a SHA-256 state")
	if err := s.CompactFrom(context.Background(), compaction(3, 2, 10)); err != nil {
		t.Fatalf("delta on a chain whose hash does not resume: %v", err)
	}
	snap, _ := s.Snapshot()
	if data, err := s.SnapshotData(snap.GetData()); err != nil || !bytes.Equal(data, snapchain.Join([]byte("base@3"))) {
		t.Fatalf("snapshot data %q (%v), want a new base", data, err)
	}
}

// A reference naming a part twice, parts out of index order, or no hash
// state is refused as malformed.
func TestMalformedChainReferencesRefused(t *testing.T) {
	good := chain{own: true, state: []byte{1}, parts: []part{{index: 2, name: "2-1.snap", size: 3}, {index: 3, name: "3-2.snap", size: 4}}}
	if _, err := parseRef(good.ref()); err != nil {
		t.Fatalf("good reference: %v", err)
	}
	for name, c := range map[string]chain{
		"a name twice":  {own: true, state: []byte{1}, parts: []part{{index: 2, name: "2-1.snap"}, {index: 3, name: "2-1.snap"}}},
		"out of order":  {own: true, state: []byte{1}, parts: []part{{index: 3, name: "3-1.snap"}, {index: 2, name: "2-2.snap"}}},
		"no hash state": {own: true, parts: []part{{index: 2, name: "2-1.snap"}}},
		"a path":        {own: true, state: []byte{1}, parts: []part{{index: 2, name: "../2-1.snap"}}},
		"a giant part":  {own: true, state: []byte{1}, parts: []part{{index: 2, name: "2-1.snap", size: 1 << 40}}},
	} {
		if _, err := parseRef(c.ref()); err == nil {
			t.Errorf("%s: reference accepted", name)
		}
	}
}

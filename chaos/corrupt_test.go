package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker/history"
)

// dataDir writes a member's data directory as pebble and the store
// leave it, each file of size bytes of 0xAA.
func dataDir(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		size := 4096
		if strings.HasPrefix(filepath.Base(f), "marker.") {
			size = 0 // pebble's markers are empty: their name is their content
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte{0xAA}, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The family damages only data files, by kind: never the member's
// identity, its peers' incarnations, its clean-stop seal or an empty
// marker.
func TestDamageKinds(t *testing.T) {
	dir := dataDir(t, "000002.log", "000009.log", "000005.sst", "MANIFEST-000001", "OPTIONS-000003",
		"snap/00000000000000000100-1.snap", "identity.json", "peers.json", "raftlock-clean-stop",
		"marker.manifest.000001.MANIFEST-000001", "snap.tmp/chunk")
	for kind, want := range map[string][]string{
		fault.DamageLog:      {"000002.log", "000005.sst", "000009.log"},
		fault.DamageSnapshot: {"snap/00000000000000000100-1.snap"},
		fault.DamageMetadata: {"MANIFEST-000001", "OPTIONS-000003"},
	} {
		got, _ := damageFiles(dir, kind)
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", kind, got, want)
		}
	}
}

// A flip changes exactly the bit the history records, a truncation cuts
// the file where it says; the newest log is the one pebble writes; a
// member without a file of the kind drawn gets the next kind's.
func TestDamageFileDoesWhatItRecords(t *testing.T) {
	dir := dataDir(t, "000002.log", "000009.log", "000005.sst", "OPTIONS-000003")
	d, err := damageFile(dir, fault.Corrupt{Kind: fault.DamageLog, Newest: true, Pos: 0.5, Bit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d.File != "000009.log" || d.How != "bitflip" || *d.Offset != 2048 || *d.Bit != 3 || d.Size != 4096 {
		t.Fatalf("damage %+v, want bit 3 of byte 2048 of the newest log", d)
	}
	b, _ := os.ReadFile(filepath.Join(dir, d.File))
	for i, c := range b {
		if want := byte(0xAA); i == 2048 {
			if c != want^(1<<3) {
				t.Fatalf("byte %d is %x, want %x", i, c, want^(1<<3))
			}
		} else if c != want {
			t.Fatalf("byte %d changed: %x", i, c)
		}
	}
	d, err = damageFile(dir, fault.Corrupt{Kind: fault.DamageSnapshot, Truncate: true, Pos: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != fault.DamageMetadata || d.File != "OPTIONS-000003" || d.How != "truncate" || *d.TruncatedTo != 1024 {
		t.Fatalf("damage %+v, want OPTIONS cut to 1024 bytes (no snapshot file)", d)
	}
	if st, _ := os.Stat(filepath.Join(dir, d.File)); st.Size() != 1024 {
		t.Fatalf("%s has %d bytes, want 1024", d.File, st.Size())
	}
	if _, err := damageFile(t.TempDir(), fault.Corrupt{Kind: fault.DamageLog}); err == nil {
		t.Fatal("damaged a member with no data file")
	}
}

// A log's tail flips land in its last 16 KiB.
func TestTailFlipsLandNearTheEnd(t *testing.T) {
	c := fault.Corrupt{Tail: true, Pos: 0.999}
	if off := c.Offset(1<<20, fault.DamageLog); off < 1<<20-16<<10 || off >= 1<<20 {
		t.Fatalf("tail flip at %d of 1 MiB", off)
	}
	if off := c.Offset(1000, fault.DamageSnapshot); off != 999 {
		t.Fatalf("a snapshot's flip at %d of 1000, want 999 (tails are a log's)", off)
	}
}

// The report counts each outcome, and a member that started with its
// store ending before what it had applied is a storage loss; one that
// refused, or whose applied index was not read, is none.
func TestCorruptReportCountsOutcomesAndLosses(t *testing.T) {
	var l corruptLog
	dmg := func(outcome string) history.Damage {
		return history.Damage{File: "000004.log", Kind: fault.DamageLog, How: "bitflip", Outcome: outcome}
	}
	l.add(CorruptFault{Node: 1, Damage: dmg(outcomeRefused), AppliedBefore: 500, Replacement: "replace 1 by 4"})
	l.add(CorruptFault{Node: 2, Damage: dmg(outcomeRefused), AppliedBefore: 500, Replacement: "remove 2 failed"})
	l.add(CorruptFault{Node: 3, Damage: dmg(outcomeStarted), AppliedBefore: 700, OpenedLast: 700})
	l.add(CorruptFault{Node: 4, Damage: dmg(outcomeRecovered), AppliedBefore: 900, OpenedLast: 132})
	l.add(CorruptFault{Node: 5, Damage: dmg(outcomeStarted), OpenedLast: 10})
	l.add(CorruptFault{Node: 6, Damage: dmg(outcomeCrashed)})
	r := l.Report()
	if r.Refused != 2 || r.Replaced != 1 || r.ReplaceFailed != 1 || r.Started != 2 || r.Recovered != 1 || r.Crashed != 1 {
		t.Fatalf("counts %+v", r)
	}
	if len(r.Losses) != 1 || !strings.Contains(r.Losses[0], "member 4 had applied index 900") || !strings.Contains(r.Losses[0], "ending at 132") {
		t.Fatalf("losses %q, want member 4's", r.Losses)
	}
	if sl := r.storageLoss(); sl == nil || sl.Started != 3 || len(sl.Losses) != 1 {
		t.Fatalf("storage-loss evidence %+v", sl)
	}
	if (CorruptReport{}).storageLoss() != nil {
		t.Fatal("a run without corrupt faults has storage-loss evidence")
	}
}

// A member that exits with the refusal line is no crash; one that
// panicked is.
func TestRefusalIsNoCrash(t *testing.T) {
	s := &Supervisor{crashes: []Crash{
		{Node: 1, Reason: "raftlock node: refusing to start: 000004.log in /d is damaged: ..."},
		{Node: 2, Reason: "raftlock node: refusing to start: snap/x.snap in /d is damaged"},
		{Node: 2, Reason: "panic: runtime error"},
	}}
	if line, ok := s.excuseRefusal(1, 0); !ok || !strings.HasPrefix(line, "refusing to start: 000004.log") {
		t.Fatalf("refusal of node 1: %q %v", line, ok)
	}
	if _, ok := s.excuseRefusal(2, 0); ok {
		t.Fatal("a panic after a refusal was excused")
	}
	if len(s.crashes) != 2 {
		t.Fatalf("crashes left %v, want node 2's two", s.crashes)
	}
	if _, ok := s.excuseRefusal(1, 2); ok {
		t.Fatal("a refusal excused twice")
	}
}

// corrupt is opt-in, runs alone and does not mix with the power families
// (a newcomer's data would be on no mount); it gives the run spare
// member addresses for the replacements.
func TestCorruptIsOptIn(t *testing.T) {
	if slices.Contains(Families, fault.FamilyCorrupt) || !slices.Contains(OptInFamilies, fault.FamilyCorrupt) {
		t.Fatal("corrupt: want an opt-in family")
	}
	if slices.Contains(combinable, fault.FamilyCorrupt) {
		t.Fatal("corrupt must run alone")
	}
	cfg := powerConfig(fault.FamilyCorrupt)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = powerConfig(fault.FamilyCorrupt, fault.FamilyPower)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt with power: %v", err)
	}
}

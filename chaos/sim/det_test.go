package sim

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// runBytes runs cfg and returns its history.jsonl and trace.log bytes.
func runBytes(t *testing.T, cfg Config) (hist, trace []byte) {
	t.Helper()
	var tr, h bytes.Buffer
	cfg.Trace = &tr
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHistory(&h, res); err != nil {
		t.Fatal(err)
	}
	return h.Bytes(), tr.Bytes()
}

// runTwice runs cfg twice and fails the test unless both runs wrote the
// same history.jsonl and trace.log, byte for byte; it returns them.
func runTwice(t *testing.T, what string, cfg Config) (hist, trace []byte) {
	t.Helper()
	h1, t1 := runBytes(t, cfg)
	h2, t2 := runBytes(t, cfg)
	if !bytes.Equal(h1, h2) {
		t.Fatalf("%s: history.jsonl differs between two runs (%d vs %d bytes)", what, len(h1), len(h2))
	}
	if !bytes.Equal(t1, t2) {
		i := 0
		for i < len(t1) && i < len(t2) && t1[i] == t2[i] {
			i++
		}
		t.Fatalf("%s: trace.log differs at byte %d: %q vs %q", what, i, excerpt(t1, i), excerpt(t2, i))
	}
	return h1, t1
}

// TestSameSeedSameBytes: the same seed and flags give byte-identical
// history.jsonl and trace.log, with every fault family on.
func TestSameSeedSameBytes(t *testing.T) {
	for _, seed := range []uint64{3, 11} {
		cfg := Config{Seed: seed, Duration: 6 * time.Second, Faults: Families, FaultInterval: 500 * time.Millisecond}
		h1, t1 := runTwice(t, fmt.Sprintf("seed %d", seed), cfg)
		if len(t1) < 1000 || bytes.Count(h1, []byte("\n")) < 50 {
			t.Fatalf("seed %d: suspiciously small run: %d trace bytes, %d history lines", seed, len(t1), bytes.Count(h1, []byte("\n")))
		}
		// Another seed gives another run.
		cfg.Seed++
		if h3, _ := runBytes(t, cfg); bytes.Equal(h1, h3) {
			t.Fatalf("seeds %d and %d gave the same history", seed, seed+1)
		}
	}
}

// TestSameSeedSameBytesWithHeldLocks: so do runs with a table of held
// locks, whose fill batches requests and whose big snapshots stream in
// chunks; and with the planted snapshot-partial, whose broken streams
// deliver truncated data.
func TestSameSeedSameBytesWithHeldLocks(t *testing.T) {
	for _, bug := range []string{"", "snapshot-partial"} {
		cfg := Config{Seed: 8, Duration: 6 * time.Second, Faults: Families, Held: 2000, KeySize: 100,
			FaultInterval: 500 * time.Millisecond, Bug: bug}
		h1, t1 := runTwice(t, fmt.Sprintf("bug %q", bug), cfg)
		if n := bytes.Count(h1, []byte(`"held/`)); n < 2*2000 {
			t.Fatalf("bug %q: %d history events on held keys, want the fill's 2000 invokes and answers", bug, n)
		}
		if !bytes.Contains(t1, []byte(" chunks=")) {
			t.Fatalf("bug %q: no snapshot streamed", bug)
		}
	}
}

func excerpt(b []byte, i int) string {
	lo, hi := max(0, i-80), min(len(b), i+80)
	return string(b[lo:hi])
}

// TestSameSeedSameBytesWithMembership: so do runs whose membership family
// removes a leader that then applies its own removal as leader, and
// restarts a joiner before it applied its own add (seed 11 meets both).
func TestSameSeedSameBytesWithMembership(t *testing.T) {
	cfg := Config{Seed: 11, Duration: 6 * time.Second, Faults: Families, FaultInterval: 300 * time.Millisecond}
	h1, t1 := runTwice(t, "membership", cfg)
	for _, want := range []string{`"f":"member-remove"`, `"f":"member-add"`, `"f":"member-promote"`} {
		if !bytes.Contains(h1, []byte(want)) {
			t.Errorf("no %s in the history", want)
		}
	}
	for _, want := range []string{"applied its own removal (leader=true", "membership joiner-crash node="} {
		if !bytes.Contains(t1, []byte(want)) {
			t.Errorf("no %q in the trace", want)
		}
	}
}

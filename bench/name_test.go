package bench

import "testing"

func TestAblationNameSpellsTheFlags(t *testing.T) {
	if got := (RaftlockConfig{}).AblationName(); got != "raftlock" {
		t.Fatalf("no ablation: %q", got)
	}
	cfg := RaftlockConfig{NoBatch: true, NoWriteOverlap: true, MaxInflight: 1, MaxUncommitted: -1, TLS: true}
	if got, want := cfg.AblationName(), "raftlock --no-batch --no-write-overlap --max-inflight 1 --max-uncommitted -1 --tls"; got != want {
		t.Fatalf("AblationName = %q, want %q", got, want)
	}
}

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
	for protocol, want := range map[string]string{"": "raftlock", "binary": "raftlock", "grpc": "raftlock --protocol grpc", "http": "raftlock --protocol http"} {
		if got := (RaftlockConfig{Protocol: protocol}).AblationName(); got != want {
			t.Errorf("protocol %q: AblationName = %q, want %q", protocol, got, want)
		}
	}
}

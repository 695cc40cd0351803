package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The corrupt family on real processes, briefly: members stopped, a data
// file of each damaged, and each member back by refusing its data (then
// replaced), recovering or starting whole. The run is valid, its
// verdict's stats count every damage and how each member came back, the
// history records each damage and its end, and summary.md says it.
func TestChaosCorruptEndToEnd(t *testing.T) {
	startsProcesses(t)
	bin := buildBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	stdout, stderr, code := runBin(t, bin, "chaos", "--nemesis", "corrupt", "--seed", "2", "--duration", "15s",
		"--fault-interval", "1s", "--fault-duration", "1s", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var v struct {
		Valid  bool `json:"valid"`
		Checks []struct {
			Name, Status string
		} `json:"checks"`
		Stats struct {
			Corruptions      int `json:"corruptions"`
			CorruptRefused   int `json:"corrupt_refused"`
			CorruptRecovered int `json:"corrupt_recovered"`
			CorruptStarted   int `json:"corrupt_started"`
			CorruptCrashed   int `json:"corrupt_crashed"`
			MembersReplaced  int `json:"members_replaced"`
		} `json:"stats"`
	}
	b, err := os.ReadFile(filepath.Join(out, "verdict.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	s := v.Stats
	if !v.Valid || s.Corruptions == 0 || s.CorruptCrashed != 0 ||
		s.CorruptRefused+s.CorruptRecovered+s.CorruptStarted != s.Corruptions || s.MembersReplaced < s.CorruptRefused {
		t.Fatalf("verdict valid %v, stats %+v: want valid, damages each accounted for, none crashed, every refusal replaced", v.Valid, s)
	}
	for _, c := range v.Checks {
		if c.Name == "storage-loss" && c.Status != "ok" {
			t.Fatalf("storage-loss %s", c.Status)
		}
	}
	h, err := os.ReadFile(filepath.Join(out, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n, ends := strings.Count(string(h), `"f":"corrupt"`), strings.Count(string(h), `"f":"corrupt-end"`); n != s.Corruptions || ends != n {
		t.Fatalf("history: %d corrupt and %d corrupt-end events, want %d each", n, ends, s.Corruptions)
	}
	sum, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	if !strings.Contains(string(sum), "Corrupt: ") {
		t.Fatalf("summary.md does not say what the corrupt family did:\n%s", sum)
	}
	if _, err := os.Stat(filepath.Join(out, "corrupt.json")); err != nil {
		t.Fatal(err)
	}
}

package chaos

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
)

// defaultHeaderFields are the history header's fields of a default run,
// as they were before --resource and --client-procs: a default run's
// header must stay exactly this.
var defaultHeaderFields = []string{"bug", "clients", "held", "key_size", "keys", "lease_max_ms", "lease_min_ms", "nemeses", "nodes",
	"peer_frame_limit", "seed", "snapshot_by_entries", "snapshot_chunk_size", "snapshot_every", "snapshot_keep", "time_s"}

// A default run's header has the fields it always had, and no other;
// an unfenced run's adds resource and changes none of them.
func TestHeaderNamesOnlyWhatDiffersFromADefaultRun(t *testing.T) {
	cfg := Defaults()
	cfg.Seed, cfg.Nemeses = 7, Families
	keys := workload.Keys(cfg.Keys)
	def := cfg.header(keys)
	if got := slices.Sorted(mapKeys(def)); !slices.Equal(got, defaultHeaderFields) {
		t.Fatalf("default header fields %v, want %v", got, defaultHeaderFields)
	}
	for _, r := range []workload.Resource{"", workload.Fenced} {
		cfg.Resource = r
		if _, lines := cfg.settingsNotes(); len(lines) > 0 {
			t.Errorf("resource %q notes %v; want none", r, lines)
		}
	}
	cfg.Resource = workload.Unfenced
	unf := cfg.header(keys)
	if unf["resource"] != "unfenced" || len(unf) != len(def)+1 {
		t.Fatalf("unfenced header %v", unf)
	}
	for k, v := range def {
		if !slices.Contains([]string{"keys", "nemeses"}, k) && unf[k] != v {
			t.Errorf("unfenced header changes %s: %v, was %v", k, unf[k], v)
		}
	}
	cfg.Resource = "sloppy"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `unknown --resource "sloppy"`) {
		t.Fatalf("Validate with --resource sloppy: %v", err)
	}
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// shortRun is a short run's settings: a few clients on two keys under
// pauses of the members.
func shortRun(t *testing.T, seed uint64, resource workload.Resource, nemeses ...fault.Family) Config {
	return Config{Bin: buildRaftlock(t), Out: t.TempDir(), Nodes: 3, Seed: seed, Time: 8 * time.Second, Clients: 6, Keys: 2,
		Nemeses: nemeses, FaultInterval: time.Second, FaultDuration: 1500 * time.Millisecond,
		LeaseMin: 200 * time.Millisecond, LeaseMax: 500 * time.Millisecond, SnapshotEvery: 100, SnapshotKeep: 20, Resource: resource}
}

// With the unfenced register a holder that stalled past its lease (the
// plan's stall, one critical section in twenty) overwrites the next
// holder's update: the fenced-resource check finds it, and the run is
// invalid (exit 1), its mode named in the header and summary.md.
func TestUnfencedResourceShowsLostUpdates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cfg := shortRun(t, 3, workload.Unfenced)
	v, _, err := RunAndCheck(context.Background(), cfg, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Valid || v.ExitCode != checker.ExitViolation || !failed(v, "fenced-resource") {
		t.Fatalf("unfenced run: verdict %s, exit %d; want fenced-resource violated (reports in %s)", v.Verdict, v.ExitCode, cfg.Out)
	}
	summary, err := os.ReadFile(filepath.Join(cfg.Out, "summary.md"))
	if err != nil || !strings.Contains(string(summary), "Resource: unfenced") {
		t.Fatalf("summary.md does not name the resource: %v\n%s", err, summary)
	}
	hist, err := os.ReadFile(filepath.Join(cfg.Out, "history.jsonl"))
	if err != nil || !strings.Contains(strings.SplitN(string(hist), "\n", 2)[0], `"resource":"unfenced"`) {
		t.Fatalf("history header does not name the resource: %v", err)
	}
}

// failed says whether check found violations.
func failed(v *checker.Verdict, check string) bool {
	for _, r := range v.Checks {
		if r.Name == check {
			return r.Status == checker.StatusViolation
		}
	}
	return false
}

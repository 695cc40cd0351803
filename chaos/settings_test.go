package chaos

import (
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
)

// A run's settings: the defaults, and what the history header and
// summary.md say of a run whose settings differ from them.

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

// client-pause without client processes is named, not dropped: the
// header and summary.md say it did not run, and the nemesis does not
// deal it.
func TestClientPauseWithoutClientProcessesIsNamedNotRun(t *testing.T) {
	cfg := Defaults()
	cfg.Nemeses = []fault.Family{fault.FamilyKill, fault.FamilyClientPause}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	run, notRun := cfg.nemeses()
	if !slices.Equal(run, []fault.Family{fault.FamilyKill}) || !slices.Equal(notRun, []fault.Family{fault.FamilyClientPause}) {
		t.Fatalf("run %v, not run %v", run, notRun)
	}
	h, lines := cfg.settingsNotes()
	if !slices.Equal(h["nemeses_not_run"].([]fault.Family), notRun) || len(lines) != 1 || !strings.Contains(lines[0], "Not run: client-pause") {
		t.Fatalf("header %v, lines %q", h, lines)
	}
	cfg.ClientProcs = 2
	if _, notRun := cfg.nemeses(); len(notRun) > 0 {
		t.Fatalf("with client processes, not run %v", notRun)
	}
	if h, _ := cfg.settingsNotes(); h["client_procs"] != 2 || h["nemeses_not_run"] != nil {
		t.Fatalf("header %v", h)
	}
}

// The defaults `raftlock chaos` starts from make a valid run with every
// default family.
func TestDefaultsAreAValidRun(t *testing.T) {
	d := Defaults()
	d.Nemeses = Families
	if err := d.Validate(); err != nil {
		t.Fatalf("chaos.Defaults() does not validate: %v", err)
	}
}

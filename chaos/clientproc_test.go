package chaos

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
)

// clientPauseRun runs a short run with two client processes under the
// client-pause family alone, and returns its verdict and the history
// processes it paused.
func clientPauseRun(t *testing.T, resource workload.Resource) (*checker.Verdict, *Result, []history.Process) {
	t.Helper()
	cfg := shortRun(t, 11, resource, fault.FamilyClientPause)
	cfg.Time, cfg.ClientProcs, cfg.Clients = 10*time.Second, 2, 3
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var paused []history.Process
	for _, e := range res.Events {
		if e.F == history.FaultClientPause {
			paused = append(paused, e.Value.Processes...)
		}
	}
	if len(paused) == 0 {
		t.Fatalf("no client pause in the history (logs in %s)", cfg.Out)
	}
	return Check(res, 0), res, paused
}

// A client process paused past its lease between its read and its write
// overwrites the next holder's update when nothing fences the register:
// the fenced-resource check names the paused client's write, and the run
// is invalid (exit 1).
func TestUnfencedRegisterUnderClientPausesLosesUpdates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	v, _, paused := clientPauseRun(t, workload.Unfenced)
	if v.Valid || v.ExitCode != checker.ExitViolation {
		t.Fatalf("verdict %s, exit %d; want a violation", v.Verdict, v.ExitCode)
	}
	for _, r := range v.Checks {
		if r.Name != "fenced-resource" {
			continue
		}
		for _, vi := range r.Violations {
			for _, e := range vi.Events {
				if slices.Contains(paused, e.Process) {
					return
				}
			}
		}
		t.Fatalf("no fenced-resource violation names a paused client (paused %v): %+v", paused, r.Violations)
	}
	t.Fatal("no fenced-resource check")
}

// The same pauses against the fenced store: the paused client's write is
// refused as stale, and the run is valid.
func TestFencedStoreUnderClientPausesStaysValid(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	v, res, paused := clientPauseRun(t, workload.Fenced)
	if !v.Valid {
		t.Fatalf("verdict %s: %+v", v.Verdict, v.Checks)
	}
	stale := false
	for _, e := range res.Events {
		stale = stale || (slices.Contains(paused, e.Process) && e.Value.Error == "stale-token")
	}
	if !stale {
		t.Logf("no paused client's access was refused as stale (the next holder may not have written while it was paused)")
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

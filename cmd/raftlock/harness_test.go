package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/reportdir"
)

// userDir is a directory holding a user's file, as --out might name by
// mistake.
func userDir(t *testing.T) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "thesis.tex")
	if err := os.WriteFile(file, []byte("years of work"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

// A bad flag is reported before anything on disk is touched, and a
// directory that is not a previous report is refused, never deleted.
func TestChaosNeverDeletesWhatIsNotAReport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		inStderr string
	}{
		{"bad --time", []string{"--seed", "9", "--time", "0s"}, "--duration must be positive"},
		{"bad --nodes", []string{"--seed", "9", "--nodes", "4"}, "--nodes must be 3 or 5"},
		{"bad --nemesis", []string{"--seed", "9", "--nemesis", "kill,meteor"}, `unknown nemesis "meteor"`},
		{"good flags, foreign directory", []string{"--seed", "9", "--duration", "1s"}, "not a raftlock report"},
	} {
		dir, file := userDir(t)
		code, _, stderr := cli(t, append(append([]string{"chaos"}, tc.args...), "--out", dir)...)
		if code != 3 || !strings.Contains(stderr, tc.inStderr) {
			t.Errorf("%s: exit %d, stderr %q; want 3 with %q", tc.name, code, stderr, tc.inStderr)
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("%s: the user's file is gone: %v", tc.name, err)
		}
	}
}

// A misspelt planted bug is refused before anything starts, as sim
// refuses it, naming the valid ones: started, no member could come up and
// the run would blame the cluster.
func TestChaosRefusesAnUnknownBugFirst(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report")
	code, stderr := refusal(t, "chaos", "--seed", "1", "--duration", "1s", "--unsafe-bug", "nope", "--out", out)
	if code != 3 || !strings.Contains(stderr, `unknown --unsafe-bug "nope"`) || !strings.Contains(stderr, "early-expire") ||
		strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("chaos --unsafe-bug nope: exit %d, stderr %q; want exit 3, one line listing the bugs", code, stderr)
	}
	mustNotExist(t, out, "chaos with an unknown bug")
	if code, _, stderr := cli(t, "sim", "--seed", "1", "--unsafe-bug", "nope"); code != 3 || !strings.Contains(stderr, "early-expire") {
		t.Fatalf("sim --unsafe-bug nope: exit %d, stderr %q", code, stderr)
	}
}

// Help reads the same on every run: the seed's default is "random", not a
// number drawn at startup.
func TestChaosHelpIsTheSameOnEveryRun(t *testing.T) {
	_, _, first := cli(t, "chaos", "--help")
	time.Sleep(2 * time.Millisecond)
	_, _, second := cli(t, "chaos", "--help")
	if first != second {
		t.Errorf("help differs between runs:\n%s\n---\n%s", first, second)
	}
	for _, want := range []string{"--seed N", "(default random)", "--duration duration", "--fault-interval", "--fault-duration", "--time duration\n    \talias of --duration"} {
		if !strings.Contains(first, want) {
			t.Errorf("help lacks %q:\n%s", want, first)
		}
	}
}

// check --out ends with the list of the files it wrote, timeline.html
// among them, and nothing it did not write (its report marker).
func TestCheckListsTheReportsItWrote(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	code, out, stderr := cli(t, "check", testdata("well-formed.jsonl"), "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	listed, ok := strings.CutPrefix(last, "reports in "+dir+" (")
	if !ok {
		t.Fatalf("last line %q", last)
	}
	names := strings.Split(strings.TrimSuffix(listed, ")"), ", ")
	if !slices.Contains(names, "timeline.html") || slices.Contains(names, reportdir.Marker) {
		t.Errorf("listed %v", names)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("listed %s, not written: %v", n, err)
		}
	}
}

// bench --repeat is checked before anything starts.
func TestBenchRepeatMustBePositive(t *testing.T) {
	code, _, stderr := cli(t, "bench", "--repeat", "0")
	if code != exitUsage || !strings.Contains(stderr, "--repeat must be at least 1") {
		t.Errorf("bench --repeat 0: exit %d, %q; want a usage error", code, stderr)
	}
}

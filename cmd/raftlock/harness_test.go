package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
		{"bad --nemesis", []string{"--seed", "9", "--nemesis", "kill,meteor"}, `unknown nemesis "meteor" (want some of [kill pause partition clock net snapshot garbage], or of the opt-in [garbage-heartbeat membership power power-all corrupt client-pause])`},
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
// number drawn at startup (two runs draw two numbers: no pause is needed
// between them for a drawn default to differ).
func TestChaosHelpIsTheSameOnEveryRun(t *testing.T) {
	_, _, first := cli(t, "chaos", "--help")
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

func testdata(name string) string { return filepath.Join("..", "..", "checker", "testdata", name) }

// raftlock check exits 3 for a malformed history, naming the line, and 2
// when there is nothing to check: neither ever reads as valid.
func TestCheckExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{testdata("well-formed.jsonl")}, 0, ""},
		{[]string{testdata("lease-every-pair-fail.jsonl")}, 1, "violations found"},
		{[]string{testdata("malformed-two-objects-one-line.jsonl")}, 3, "line 2: unexpected text after the event"},
		{[]string{testdata("malformed-trailing-garbage.jsonl")}, 3, "line 2: unexpected text after the event"},
		{[]string{testdata("malformed-acquire-without-lease.jsonl")}, 3, "line 2: acquire invocation without a positive lease_ms"},
		{[]string{testdata("malformed-time-backwards.jsonl")}, 3, "line 3: time 4000000 goes backwards"},
		{[]string{testdata("malformed-completion-before-invocation.jsonl")}, 3, "line 2: completion at time 4000000 stamped before its invocation"},
		{[]string{testdata("empty.jsonl")}, 2, "nothing to check"},
		{[]string{testdata("header-only.jsonl")}, 2, "nothing to check"},
	} {
		code, _, stderr := cli(t, append([]string{"check"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.inStderr) {
			t.Errorf("check %v: exit %d, stderr %q; want exit %d with %q", tc.args, code, stderr, tc.code, tc.inStderr)
		}
	}
	// With --json, no verdict still prints an object a script can read,
	// from check, chaos and sim alike.
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"check", testdata("malformed-time-backwards.jsonl")}, "line 3: time 4000000 goes backwards"},
		{[]string{"chaos", "--nodes", "4"}, "--nodes must be 3 or 5"},
		{[]string{"sim", "--nodes", "4"}, "--nodes must be 3 or 5"},
	} {
		code, stdout, _ := cli(t, append(tc.args, "--json")...)
		var got struct {
			Valid    bool   `json:"valid"`
			Verdict  string `json:"verdict"`
			ExitCode int    `json:"exit_code"`
			Error    string `json:"error"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil || code != 3 || got.Valid || got.Verdict != "harness-failed" ||
			got.ExitCode != 3 || !strings.Contains(got.Error, tc.err) {
			t.Errorf("%v --json: exit %d, stdout %q (%v)", tc.args, code, stdout, err)
		}
	}
}

// A history whose last line is cut short, as a harness killed in the
// middle of a write leaves it, is checked on its whole lines: check says
// it ignored the cut line, in the text and the JSON, and the release the
// line would have completed is info.
func TestCheckIgnoresALastLineCutShort(t *testing.T) {
	h := testdata("cut-last-line.jsonl")
	code, out, stderr := cli(t, "check", h)
	if code != 0 || !strings.Contains(out, "its last line (5) is cut short and was ignored") || !strings.Contains(out, "info 1") {
		t.Fatalf("exit %d, want 0 with the cut line named\n%s%s", code, out, stderr)
	}
	code, out, _ = cli(t, "check", h, "--json")
	var v struct {
		Valid bool     `json:"valid"`
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || !v.Valid || len(v.Notes) != 1 || !strings.Contains(v.Notes[0], "cut short") {
		t.Fatalf("--json: exit %d, %s (%v)", code, out, err)
	}
}

// The header's nemesis list names clock faults, but none happened near the
// pair: lease timing decides. --clock-faults is the explicit override that
// makes it advisory.
func TestCheckDecidesLeaseTimingUnlessClockFaultsDeclared(t *testing.T) {
	h := testdata("clock-outside-window-fail.jsonl")
	if code, out, _ := cli(t, "check", h); code != 1 || !strings.Contains(out, "lease-timing | violation | true") {
		t.Errorf("default: exit %d, want 1 with a deciding lease-timing violation\n%s", code, out)
	}
	if code, out, _ := cli(t, "check", h, "--clock-faults"); code != 0 || !strings.Contains(out, "lease-timing | violation | false") {
		t.Errorf("--clock-faults: exit %d, want 0 with the violation reported\n%s", code, out)
	}
	if code, _, _ := cli(t, "check", h, "--lease-tolerance", "500ms"); code != 0 {
		t.Errorf("--lease-tolerance 500ms: exit %d, want 0 (the grant is 490ms early)", code)
	}
}

func TestCheckReadsResolutions(t *testing.T) {
	h := testdata("ghost-grant-pass.jsonl")
	code, out, _ := cli(t, "check", h, "--resolved", testdata("ghost-grant-pass.resolved.json"))
	if code != 0 || !strings.Contains(out, "1 info operation settled") {
		t.Errorf("exit %d, want 0 with the resolution counted\n%s", code, out)
	}
}

// check --out follows chaos's and sim's rule: it replaces a previous
// report, and refuses a directory holding anything else (a user's own
// summary.md), or the report whose history it checks, touching nothing.
func TestCheckOutReplacesOnlyAReport(t *testing.T) {
	h := testdata("well-formed.jsonl")
	mine := t.TempDir()
	summary := filepath.Join(mine, "summary.md")
	if err := os.WriteFile(summary, []byte("my notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli(t, "check", h, "--out", mine)
	if code != 3 || !strings.Contains(stderr, "not a raftlock report") {
		t.Fatalf("check --out into a user's directory: exit %d, stderr %q; want 3", code, stderr)
	}
	if b, err := os.ReadFile(summary); err != nil || string(b) != "my notes\n" {
		t.Fatalf("the user's summary.md became %q (%v)", b, err)
	}

	report := filepath.Join(t.TempDir(), "report")
	for range 2 { // a new directory, then its own previous report
		if code, _, stderr := cli(t, "check", h, "--out", report); code != 0 {
			t.Fatalf("check --out a report directory: exit %d, stderr %q", code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(report, "verdict.json")); err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(report, "history.jsonl")
	b, err := os.ReadFile(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cli(t, "check", copied, "--out", report)
	if code != 3 || !strings.Contains(stderr, "an input of this check") {
		t.Fatalf("check --out the directory of its own history: exit %d, stderr %q; want 3", code, stderr)
	}
	if _, err := os.Stat(copied); err != nil {
		t.Fatalf("the history checked is gone: %v", err)
	}
}

// chaos-client is the harness's own: it runs and has --help, but the
// command list does not show it.
func TestChaosClientIsHidden(t *testing.T) {
	code, stdout, _ := cli(t, "--help")
	if code != 0 || strings.Contains(stdout, "chaos-client") {
		t.Fatalf("raftlock --help: exit %d, lists chaos-client:\n%s", code, stdout)
	}
	code, _, help := cli(t, "chaos-client", "--help")
	if code != 0 || !strings.Contains(help, "--endpoints") || !strings.Contains(help, "--index") {
		t.Fatalf("raftlock chaos-client --help: exit %d\n%s", code, help)
	}
	if code, _, stderr := cli(t, "chaos-client"); code != 3 || !strings.Contains(stderr, "--endpoints and --keys are required") {
		t.Fatalf("raftlock chaos-client without flags: exit %d, %q", code, stderr)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README and the benchmark results speak to users: no issue
// numbers or quotes from the tracker, targets as the project's own, links
// only inside the repository, and one unit (ops) in the bench tables.
func TestReadmesSpeakToUsers(t *testing.T) {
	for _, name := range []string{"README.md", filepath.Join("results", "bench", "README.md"), filepath.Join("docs", "http-api.md"), filepath.Join("docs", "grpc-api.md")} {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, re := range []string{`(?i)\bthe issue\b`, `(?i)issue's`, `(?i)\(issue \d+\)`, `(?i)issue \d+`, `cycles/s`, `1k cycles`} {
			if m := regexp.MustCompile(re).FindString(text); m != "" {
				t.Errorf("%s says %q", name, m)
			}
		}
		for _, m := range regexp.MustCompile(`\]\(([^)]+)\)`).FindAllStringSubmatch(text, -1) {
			if strings.Contains(m[1], "://") {
				t.Errorf("%s links outside the repository: %s", name, m[1])
			}
		}
	}
}

// Every chaos flag the README, the Makefile, CI and the mutation script
// use is a flag chaos has: a rename must not leave a script behind.
func TestScriptsUseChaosFlagsThatExist(t *testing.T) {
	calls := scriptCalls(t, `(raftlock|\$\(BIN\)|"\$bin")`, "chaos", "README.md", "Makefile", filepath.Join(".ci", "run"), filepath.Join("scripts", "mutation.sh"))
	checkFlagsExist(t, "chaos", calls, func(name, f, line string) {
		if f == "--time" {
			t.Errorf("%s still uses --time (now --duration): %s", name, line)
		}
	})
}

// Every sim flag the README, the Makefile, CI and results/sim.md use is a
// flag sim has.
func TestScriptsUseSimFlagsThatExist(t *testing.T) {
	calls := scriptCalls(t, `(raftlock|\$\(BIN\))`, "sim", "README.md", "Makefile", filepath.Join(".ci", "run"), filepath.Join("results", "sim.md"))
	checkFlagsExist(t, "sim", calls, func(string, string, string) {})
}

// scriptCalls are the calls of command (after the binary, as matched by
// bin) in each of the repository's files named, by file; a file without
// one fails the test.
func scriptCalls(t *testing.T, bin, command string, names ...string) map[string][]string {
	t.Helper()
	re := regexp.MustCompile(bin + " " + command + ` [^\n]*`)
	calls := map[string][]string{}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		if calls[name] = re.FindAllString(string(b), -1); len(calls[name]) == 0 {
			t.Errorf("%s: no %s command found", name, command)
		}
	}
	return calls
}

// checkFlagsExist fails the test for every flag of calls that command's
// --help does not list; also is called with every flag found.
func checkFlagsExist(t *testing.T, command string, calls map[string][]string, also func(name, flag, line string)) {
	t.Helper()
	_, _, help := cli(t, command, "--help")
	flagRe := regexp.MustCompile(`--[a-z][a-z-]*`)
	for name, lines := range calls {
		for _, line := range lines {
			for _, f := range flagRe.FindAllString(line, -1) {
				also(name, f, line)
				if !strings.Contains(help, "  "+f+" ") && !strings.Contains(help, "  "+f+"\n") {
					t.Errorf("%s uses %s, which %s does not have: %s", name, f, command, line)
				}
			}
		}
	}
}

// What the README's examples create in the checkout is ignored by git, so
// the next build's version does not read "+dirty" (modified).
func TestReadmeOutputsAreIgnored(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(git, "-C", root, "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	for _, p := range []string{"locks.backup", "bad.backup", "restored/1/identity.json", "pki/ca.pem", "raftlock-data/1/identity.json",
		"data/1/identity.json", "chaos-out/seed-7/history.jsonl", "sim-out/seed-1/trace.log", "ci-out/x", "mutation-out/x", "bin/raftlock"} {
		if err := exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", p).Run(); err != nil {
			t.Errorf("%s, which the README's examples create, is not git-ignored (%v)", p, err)
		}
	}
}

// The README's first screen shows the two commands a newcomer needs on a
// fresh machine, and make run builds and starts the local cluster.
func TestReadmeFirstScreenHasRunAndTest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	first := strings.Join(strings.SplitN(string(b), "\n", 41)[:40], "\n")
	for _, cmd := range []string{"    make run ", "    make test "} {
		if !strings.Contains(first, cmd) {
			t.Errorf("the README's first 40 lines do not show %q", strings.TrimSpace(cmd))
		}
	}
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^run: build\n\t\$\(BIN\) cluster\b`).Match(mk) {
		t.Error("the Makefile has no run target that builds and runs bin/raftlock cluster")
	}
}

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README and the benchmark results speak to users: no issue
// numbers or quotes from the tracker, targets as the project's own, links
// only inside the repository, and one unit (ops) in the bench tables.
func TestReadmesSpeakToUsers(t *testing.T) {
	for _, name := range []string{"README.md", filepath.Join("results", "bench", "README.md")} {
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
	_, _, help := cli(t, "chaos", "--help")
	chaosCall := regexp.MustCompile(`(raftlock|\$\(BIN\)|"\$bin") chaos [^\n]*`)
	flagRe := regexp.MustCompile(`--[a-z][a-z-]*`)
	for _, name := range []string{"README.md", "Makefile", filepath.Join(".ci", "run"), filepath.Join("scripts", "mutation.sh")} {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		calls := chaosCall.FindAllString(string(b), -1)
		if len(calls) == 0 {
			t.Errorf("%s: no chaos command found", name)
		}
		for _, line := range calls {
			for _, f := range flagRe.FindAllString(line, -1) {
				if f == "--time" {
					t.Errorf("%s still uses --time (now --duration): %s", name, line)
				}
				if !strings.Contains(help, "  "+f+" ") && !strings.Contains(help, "  "+f+"\n") {
					t.Errorf("%s uses %s, which chaos does not have: %s", name, f, line)
				}
			}
		}
	}
}

// Every sim flag the README, the Makefile, CI and results/sim.md use is a
// flag sim has.
func TestScriptsUseSimFlagsThatExist(t *testing.T) {
	_, _, help := cli(t, "sim", "--help")
	simCall := regexp.MustCompile(`(raftlock|\$\(BIN\)) sim [^\n]*`)
	flagRe := regexp.MustCompile(`--[a-z][a-z-]*`)
	for _, name := range []string{"README.md", "Makefile", filepath.Join(".ci", "run"), filepath.Join("results", "sim.md")} {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		calls := simCall.FindAllString(string(b), -1)
		if len(calls) == 0 {
			t.Errorf("%s: no sim command found", name)
		}
		for _, line := range calls {
			for _, f := range flagRe.FindAllString(line, -1) {
				if !strings.Contains(help, "  "+f+" ") && !strings.Contains(help, "  "+f+"\n") {
					t.Errorf("%s uses %s, which sim does not have: %s", name, f, line)
				}
			}
		}
	}
}

// Package reportdir manages the directories raftlock's harness writes its
// reports into (chaos, a failing sim seed, check --out): it replaces a
// previous report and refuses to touch anything else, so a mistyped --out
// never costs a user's files.
package reportdir

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Marker is the file that makes a directory a raftlock report (of
// chaos, a failing sim seed or check --out), one a later run may replace.
// A user's directory never has it.
const Marker = ".raftlock-report"

// Prepare makes dir an empty report directory. It replaces a
// previous report (one holding Marker, or, from before the marker,
// a history.jsonl that starts with raftlock's header line) and refuses any
// other non-empty directory, so a mistyped --out never costs a user's files.
func Prepare(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("--out %s: %w", dir, err)
	case len(entries) == 0:
	case !isReport(dir):
		return fmt.Errorf("--out %s holds files that are not a raftlock report (%s): refusing to delete them; choose another --out or empty it yourself",
			dir, entries[0].Name())
	case foreignEntry(entries) != "":
		return fmt.Errorf("--out %s is a raftlock report with something added (%s): refusing to delete it; move it out or choose another --out",
			dir, foreignEntry(entries))
	default:
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("replace the previous report in %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	note := []byte("This directory is a raftlock report (chaos, sim or check): the next run with the same --out replaces it.\n")
	if err := os.WriteFile(filepath.Join(dir, Marker), note, 0o644); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	return nil
}

// foreignEntry names the first entry of a report directory that no run
// writes (a user's notes, say), or "".
func foreignEntry(entries []fs.DirEntry) string {
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir() && name == "logs":
		case !e.IsDir() && (slices.Contains(fileNames(), name) ||
			(strings.HasPrefix(name, "lin-") && strings.HasSuffix(name, ".html"))):
		default:
			return name
		}
	}
	return ""
}

// fileNames are the files a chaos run (or a failing sim seed) writes into
// its report.
func fileNames() []string {
	return []string{Marker, "history.jsonl", "verdict.json", "summary.md", "latency.png",
		"timeline.html", "digests.json", "committed-log.json", "resolved.json", "trace.log", "garbage.json", "membership.json", "corrupt.json"}
}

// isReport tells whether dir holds a previous raftlock chaos report.
func isReport(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, Marker)); err == nil {
		return true
	}
	f, err := os.Open(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return false
	}
	defer f.Close()
	first, _ := bufio.NewReader(f).Peek(len(`{"header"`))
	return bytes.Equal(first, []byte(`{"header"`))
}

// Files lists what a run wrote into its fresh report directory:
// files by name, directories with a trailing slash, the marker left out.
func Files(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		switch {
		case e.Name() == Marker:
		case e.IsDir():
			names = append(names, e.Name()+"/")
		default:
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Describe names report files for the last line of a run, most
// useful first; many per-key visualisations are counted, not listed.
func Describe(names []string) string {
	rank := func(n string) int {
		i := slices.Index([]string{"summary.md", "verdict.json", "timeline.html", "latency.png"}, n)
		if i < 0 {
			return 4
		}
		return i
	}
	names = slices.Clone(names)
	slices.SortStableFunc(names, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var out, lin []string
	for _, n := range names {
		if strings.HasPrefix(n, "lin-") && strings.HasSuffix(n, ".html") {
			lin = append(lin, n)
			continue
		}
		out = append(out, n)
	}
	if len(lin) > 3 {
		out = append(out, fmt.Sprintf("lin-*.html for %d keys", len(lin)))
	} else {
		out = append(out, lin...)
	}
	if len(out) == 0 {
		return "nothing written"
	}
	return strings.Join(out, ", ")
}

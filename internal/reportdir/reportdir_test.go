package reportdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrepare(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A report written by this version: replaced (the marker says the
	// directory is the harness's), unless something was added to it.
	marked := filepath.Join(root, "marked")
	if err := Prepare(marked); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(marked, "logs", "n1.log"), "old")
	if err := Prepare(marked); err != nil {
		t.Fatalf("previous report: %v", err)
	}
	if _, err := os.Stat(filepath.Join(marked, "logs")); err == nil {
		t.Error("the previous report's logs are still there")
	}
	// Every file a run of any family writes is the harness's, not a
	// user's: a second run of corrupt into the same --out was refused
	// for its corrupt.json.
	for _, name := range []string{"garbage.json", "membership.json", "corrupt.json", "trace.log"} {
		write(filepath.Join(marked, name), "{}")
	}
	if err := Prepare(marked); err != nil {
		t.Fatalf("a previous report with every family's files: %v", err)
	}
	write(filepath.Join(marked, "NOTES.md"), "my notes")
	if err := Prepare(marked); err == nil || !strings.Contains(err.Error(), "NOTES.md") {
		t.Errorf("a report with a user's file added: %v, want a refusal naming it", err)
	}
	if b, _ := os.ReadFile(filepath.Join(marked, "NOTES.md")); string(b) != "my notes" {
		t.Error("the user's notes inside a report are gone")
	}
	// A report from before the marker: recognised by its history header.
	legacy := filepath.Join(root, "legacy")
	write(filepath.Join(legacy, "history.jsonl"), `{"header":{"seed":1}}`+"\n")
	write(filepath.Join(legacy, "verdict.json"), "{}")
	if err := Prepare(legacy); err != nil {
		t.Fatalf("report without marker: %v", err)
	}
	if _, err := os.Stat(filepath.Join(legacy, "verdict.json")); err == nil {
		t.Error("the old report's verdict.json is still there")
	}
	// Not reports: a history.jsonl of someone else's, and a plain file.
	other := filepath.Join(root, "other")
	write(filepath.Join(other, "history.jsonl"), "my shell history\n")
	if err := Prepare(other); err == nil || !strings.Contains(err.Error(), "not a raftlock report") {
		t.Errorf("foreign history.jsonl: %v, want a refusal", err)
	}
	plain := filepath.Join(root, "file")
	write(plain, "x")
	if err := Prepare(plain); err == nil {
		t.Error("--out naming a file was accepted")
	}
	if b, _ := os.ReadFile(plain); string(b) != "x" {
		t.Error("the file was changed")
	}
}

func TestDescribe(t *testing.T) {
	got := Describe([]string{"lin-a.html", "lin-b.html", "lin-c.html", "lin-d.html", "latency.png", "logs/", "summary.md"})
	if want := "summary.md, latency.png, logs/, lin-*.html for 4 keys"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesAndLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "backup")
	for _, content := range []string{"first", "second"} {
		if err := Write(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(name); err != nil || string(b) != content {
			t.Fatalf("read %q, %v; want %q", b, err, content)
		}
	}
	if fi, err := os.Stat(name); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d files in the directory, want 1", len(entries))
	}
	err := Write(filepath.Join(dir, "missing", "f"), nil, 0o600)
	if err == nil || !strings.Contains(err.Error(), "directory "+filepath.Join(dir, "missing")) {
		t.Fatalf("a missing directory: %v", err)
	}
}

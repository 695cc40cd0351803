package main

import (
	"os/exec"
	"strings"
	"testing"
)

// layerOf is the layer of a package of this module (path relative to the
// module), as ARCHITECTURE.md draws them from the top: cmd/raftlock;
// chaos and bench; node/embed and node/nodetest above the rest of node;
// checker and member; client, internal, proto and fsm.
func layerOf(pkg string) int {
	switch {
	case strings.HasPrefix(pkg, "cmd/"):
		return 6
	case strings.HasPrefix(pkg, "chaos"), strings.HasPrefix(pkg, "bench"):
		return 5
	case strings.HasPrefix(pkg, "node/embed"), strings.HasPrefix(pkg, "node/nodetest"):
		return 4
	case strings.HasPrefix(pkg, "node"):
		return 3
	case strings.HasPrefix(pkg, "checker"), strings.HasPrefix(pkg, "member"):
		return 2
	}
	return 1
}

// No package imports one of a higher layer (tests may: a client test runs
// a cluster), so that a lower layer builds and reads without the ones
// above it.
func TestImportsRunDownTheLayers(t *testing.T) {
	const module = "github.com/raftlock/raftlock/"
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	cmd := exec.Command(goTool, "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from := strings.TrimPrefix(fields[0], module)
		pkgs++
		for _, imp := range fields[1:] {
			to, ours := strings.CutPrefix(imp, module)
			if ours && layerOf(to) > layerOf(from) {
				t.Errorf("%s imports %s, a higher layer", from, to)
			}
		}
	}
	if pkgs < 20 {
		t.Fatalf("go list named %d packages: not this module's", pkgs)
	}
}

package tlsconfig

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/raftlock/raftlock/internal/cliflag"
)

// A client without files speaks plain TCP; some of the three is a usage
// error (exit 2), files that cannot be loaded a TLS failure (exit 1), and
// the three of certs init a configuration.
func TestClientConfig(t *testing.T) {
	code := func(err error) int {
		var ce *cliflag.Error
		if errors.As(err, &ce) {
			return ce.Code
		}
		return 0
	}
	if c, err := (Files{}).ClientConfig(); c != nil || err != nil {
		t.Fatalf("no files: %v, %v", c, err)
	}
	if _, err := (Files{Cert: "c"}).ClientConfig(); code(err) != cliflag.ExitUsage {
		t.Fatalf("cert alone: %v", err)
	}
	if _, err := (Files{Cert: "c", Key: "k", CA: "a"}).ClientConfig(); code(err) != cliflag.ExitError {
		t.Fatalf("missing files: %v", err)
	}
	dir := t.TempDir()
	if _, err := Init(InitOptions{Dir: dir, Members: 1, Clients: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	f := Files{Cert: filepath.Join(dir, "client-admin.pem"), Key: filepath.Join(dir, "client-admin-key.pem"), CA: filepath.Join(dir, "ca.pem")}
	if c, err := f.ClientConfig(); err != nil || c == nil {
		t.Fatalf("certs init's files: %v, %v", c, err)
	}
}

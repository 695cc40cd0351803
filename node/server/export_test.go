package server

import (
	"net"
	"testing"
)

// ServeLocal serves s on a fresh loopback port until the test ends, and
// returns its address (for the tests of this package and package
// server_test).
func ServeLocal(t testing.TB, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

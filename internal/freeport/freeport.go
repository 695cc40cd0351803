// Package freeport picks unused loopback TCP addresses for local clusters
// (tests, the chaos harness, the benchmark).
package freeport

import "net"

// Addr returns a 127.0.0.1:PORT address that was free a moment ago.
func Addr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Package freeport picks unused loopback TCP addresses for local clusters
// (tests, the chaos harness, the benchmark).
//
// A port is free only until someone binds it, and the kernel hands ports
// of its ephemeral range to every outgoing connection that does not bind
// one. A port picked from that range (by listening on port 0) and closed
// again is soon taken as the source port of some connection, and the
// member meant to listen on it fails with "address already in use". So
// Addr picks below the ephemeral range, where only explicit binds land.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowestPort is the bottom of the range Addr picks from: above the
// well-known and most registered service ports.
const lowestPort = 10000

// attempts bounds how many random ports Addr tries before it gives up.
const attempts = 100

// Addr returns a 127.0.0.1:PORT address that was free a moment ago, with
// PORT below the kernel's ephemeral range when that range is known (so no
// outgoing connection takes it before the caller listens on it). Two
// callers racing for the same random port remain possible, though rare.
func Addr() (string, error) {
	lo, err := ephemeralLow()
	if err != nil || lo <= lowestPort+1 {
		return kernelPick()
	}
	var last error
	for range attempts {
		port := lowestPort + rand.IntN(lo-lowestPort)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			last = err
			continue
		}
		ln.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free port below %d after %d tries: %w", lo, attempts, last)
}

// TB is the part of testing.TB that For and ForIDs use (this package
// serves the harness and the benchmark too, which do not link testing).
type TB interface {
	Helper()
	Fatal(args ...any)
}

// For returns an address as Addr does, for a test: it fails t when there
// is none.
func For(t TB) string {
	t.Helper()
	addr, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// ForIDs returns an address from For for each of ids, by id.
func ForIDs(t TB, ids ...uint64) map[uint64]string {
	t.Helper()
	m := make(map[uint64]string, len(ids))
	for _, id := range ids {
		m[id] = For(t)
	}
	return m
}

// kernelPick lets the kernel choose, from its ephemeral range.
func kernelPick() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// ephemeralLow returns the first port of Linux's ephemeral range.
func ephemeralLow() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	return parseRangeLow(string(b))
}

// parseRangeLow reads the low end of an ip_local_port_range line ("32768\t60999").
func parseRangeLow(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, errors.New("ip_local_port_range: want two numbers")
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 1 || lo > 65535 {
		return 0, fmt.Errorf("ip_local_port_range: bad low port %q", f[0])
	}
	return lo, nil
}

// Picker hands out addresses as Addr does, each at most once. Addresses
// drawn for servers that do not listen yet are free to the kernel, so two
// draws of one run may land on the same port: the chaos harness draws
// every member's addresses before it starts any, and two members were
// given the same client port. The zero Picker is ready to use.
type Picker struct {
	mu   sync.Mutex
	used map[string]bool
	// draw is Addr, or a test's.
	draw func() (string, error)
}

// Addr returns an address as the package's Addr does, and never one this
// Picker returned before.
func (p *Picker) Addr() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	draw := p.draw
	if draw == nil {
		draw = Addr
	}
	for range attempts {
		a, err := draw()
		if err != nil {
			return "", err
		}
		if !p.used[a] {
			if p.used == nil {
				p.used = map[string]bool{}
			}
			p.used[a] = true
			return a, nil
		}
	}
	return "", fmt.Errorf("no address not handed out before after %d tries", attempts)
}

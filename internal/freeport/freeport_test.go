package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The port must lie below the ephemeral range: one inside it may be taken
// as a connection's source port between Addr and the caller's Listen.
func TestAddrIsBelowTheEphemeralRange(t *testing.T) {
	lo, err := ephemeralLow()
	if err != nil {
		t.Skipf("no ephemeral range to check against: %v", err)
	}
	for range 20 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if port < lowestPort || port >= lo {
			t.Fatalf("port %d outside [%d, %d)", port, lowestPort, lo)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the address Addr returned cannot be bound: %v", err)
		}
		ln.Close()
	}
}

func TestParseRangeLow(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"32768\t60999\n", 32768, true},
		{"1024 65535", 1024, true},
		{"", 0, false},
		{"32768", 0, false},
		{"x 60999", 0, false},
		{"0 60999", 0, false},
		{"70000 80000", 0, false},
	} {
		got, err := parseRangeLow(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseRangeLow(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// Two draws of the same free port hand out two different addresses.
func TestPickerNeverHandsOutAnAddressTwice(t *testing.T) {
	draws := []string{"127.0.0.1:10001", "127.0.0.1:10001", "127.0.0.1:10002"}
	p := &Picker{draw: func() (string, error) { a := draws[0]; draws = draws[1:]; return a, nil }}
	a, err := p.Addr()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Addr()
	if err != nil {
		t.Fatal(err)
	}
	if a != "127.0.0.1:10001" || b != "127.0.0.1:10002" {
		t.Errorf("handed out %s then %s; want 10001 then 10002, the repeated draw skipped", a, b)
	}
	var zero Picker
	seen := map[string]bool{}
	for range 50 {
		a, err := zero.Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}

package bench

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/cliflag"
)

func parseCommand(t *testing.T, args ...string) (*Command, error) {
	t.Helper()
	var c Command
	if _, err := cliflag.Parse(&c, "bench", args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return &c, c.Check()
}

// Check refuses, as usage errors, what cannot run, before anything starts.
func TestCheckRefusesWhatCannotRun(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "foo"}, `unknown workload "foo"`},
		{[]string{"--clients", "0"}, `bad --clients "0"`},
		{[]string{"--held", "-1"}, `bad --held "-1"`},
		{[]string{"--compare", "mysql"}, `unknown peer "mysql"`},
		{[]string{"--repeat", "0"}, "--repeat must be at least 1, got 0"},
		{[]string{"--tls", "--endpoints", "a:1"}, "--tls starts a secured cluster"},
		{[]string{"--cert", "c"}, "--cert, --key and --ca are for a running cluster"},
		{[]string{"--endpoints", "a:1", "--cert", "c"}, "TLS needs --cert, --key and --ca together"},
		{[]string{"--key-size", "3"}, "--key-size must be"},
		{[]string{"--held", "5", "--compare", "etcd"}, "--held measures raftlock only"},
		{[]string{"--nodes", "0"}, "--nodes must be 1..9, got 0"},
		{[]string{"--nodes", "10"}, "--nodes must be 1..9, got 10"},
		{[]string{"--rate", "-5"}, "--rate must be a number of ops per second"},
		{[]string{"--rate", "NaN"}, "--rate must be a number of ops per second"},
		{[]string{"--rate", "+Inf"}, "--rate must be a number of ops per second"},
		{[]string{"--out", "flags_test.go"}, "--out flags_test.go is a file, not a directory"},
		{[]string{"--fill-clients", "0"}, "--fill-clients must be at least 1"},
		{[]string{"--protocol", "smtp"}, `unknown --protocol "smtp"`},
		{[]string{"--protocol", "http", "--endpoints", "a:1"}, "against --endpoints only binary"},
	} {
		_, err := parseCommand(t, tc.args...)
		var ce *cliflag.Error
		if !errors.As(err, &ce) || ce.Code != cliflag.ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// The plan follows the flags: sizes sorted once each, the catch-up on by
// default with a non-zero table, snapshots every 1000 entries with
// --held, and room for the held keys.
func TestPlanFollowsTheFlags(t *testing.T) {
	c, err := parseCommand(t, "--held", "100,0,100", "--clients", "1,8", "--compare", "")
	if err != nil {
		t.Fatal(err)
	}
	p := c.Plan()
	if !slices.Equal(p.Held, []int{0, 100}) || !p.CatchUp || !slices.Equal(p.Clients, []int{1, 8}) {
		t.Fatalf("plan %+v", p)
	}
	if p.Raftlock.SnapshotEvery != 1000 || p.Raftlock.SnapshotKeep != 100 || p.Raftlock.MaxKeys < 100 {
		t.Fatalf("cluster %+v", p.Raftlock)
	}
	c, err = parseCommand(t, "--held", "100", "--catch-up=false", "--compare", "etcd", "--held", "")
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Plan(); p.CatchUp || !slices.Equal(p.Compare, []string{"etcd-mutex", "etcd-txn"}) || p.Raftlock.SnapshotKeep != 0 {
		t.Fatalf("plan %+v", p)
	}
}

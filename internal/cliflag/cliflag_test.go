package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"testing"
)

func TestSeedIsRandomUntilSetAndDrawnOnce(t *testing.T) {
	var s Seed
	if s.String() != "random" || s.IsSet() {
		t.Fatalf("unset seed shows %q", s.String())
	}
	if a, b := s.Value(), s.Value(); a != b || a >= 1_000_000 {
		t.Fatalf("a drawn seed changed or is too long to retype: %d then %d", a, b)
	}
	if err := s.Set("-1"); err == nil {
		t.Fatal("a negative seed was taken")
	}
	if err := s.Set("42"); err != nil || s.Value() != 42 || s.String() != "42" {
		t.Fatalf("Set(42): %v, value %d", err, s.Value())
	}
}

func TestOptBoolKeepsItsDefaultUntilSet(t *testing.T) {
	b := OptBool{Def: "on with --held"}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&b, "catch-up", "")
	if fs.Lookup("catch-up").DefValue != "on with --held" {
		t.Fatalf("default shown as %q", fs.Lookup("catch-up").DefValue)
	}
	if !b.Or(true) || b.Or(false) {
		t.Fatal("an unset flag is not its caller's default")
	}
	if err := fs.Parse([]string{"--catch-up=false"}); err != nil || b.Or(true) {
		t.Fatalf("--catch-up=false: %v, %+v", err, b)
	}
	if err := fs.Parse([]string{"--catch-up=maybe"}); err == nil {
		t.Fatal("--catch-up=maybe was taken")
	}
}

func TestLists(t *testing.T) {
	var l IntList
	if err := l.Set("3,1,,2"); err != nil || !slices.Equal(l, IntList{1, 2, 3}) || l.String() != "1,2,3" {
		t.Fatalf("IntList: %v, %v", err, l)
	}
	if err := l.Set("0"); err == nil {
		t.Fatal("IntList took 0")
	}
	if got := SplitList(" a, ,b,"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("SplitList = %q", got)
	}
	if got, err := Counts("1,5", "--clients", 1); err != nil || !slices.Equal(got, []int{1, 5}) {
		t.Fatalf("Counts = %v, %v", got, err)
	}
	if _, err := Counts("0", "--clients", 1); !isUsage(err) || err.Error() != `bad --clients "0": want integers of at least 1` {
		t.Fatalf("Counts(0) = %v", err)
	}
}

func TestEndpoints(t *testing.T) {
	if got, err := Endpoints("a:1, b:2"); err != nil || !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Fatalf("Endpoints = %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"a":   `bad endpoint "a" in --endpoints: want HOST:PORT`,
		"a:0": `bad endpoint "a:0" in --endpoints: want HOST:PORT`,
		" , ": "--endpoints is empty",
	} {
		if _, err := Endpoints(in); !isUsage(err) || err.Error() != want {
			t.Errorf("Endpoints(%q) = %v, want usage error %q", in, err, want)
		}
	}
}

func TestListenAddr(t *testing.T) {
	for _, ok := range []string{"", "127.0.0.1:8001", ":0", "[::1]:80", "localhost:65535"} {
		if err := ListenAddr("--listen", ok); err != nil {
			t.Errorf("ListenAddr(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"notanaddr", "a:65536", "a:-1", "a:b", "8001"} {
		if err := ListenAddr("--listen", bad); !isUsage(err) || err.Error() != fmt.Sprintf("bad --listen %q: want HOST:PORT", bad) {
			t.Errorf("ListenAddr(%q) = %v, want a usage error", bad, err)
		}
	}
}

func TestNames(t *testing.T) {
	if got := EnvName("fail-fast"); got != "RAFTLOCK_FAIL_FAST" {
		t.Errorf("EnvName = %q", got)
	}
	if Plural(1, "seed", "seeds") != "1 seed" || Plural(3, "seed", "seeds") != "3 seeds" {
		t.Error("Plural")
	}
}

func isUsage(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == ExitUsage
}

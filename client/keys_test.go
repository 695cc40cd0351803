package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/nodetest"
)

// The client refuses a new key that breaks the key rule (not UTF-8, a
// NUL) before it sends anything (nothing listens here), with the rule's
// message; a call naming a lock the cluster may hold takes such a key, for
// one an older version stored: it goes out (and, here, finds no member).
func TestAcquireKeepsTheKeyRule(t *testing.T) {
	cl, err := client.New([]string{"127.0.0.1:1"}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := nodetest.Context(t, 10*time.Second)
	for _, key := range []string{"u8/\xff\xfe", "a\x00b"} {
		_, err := cl.Acquire(ctx, key, time.Second, 0)
		var inv *client.InvalidArgumentError
		if !errors.As(err, &inv) || inv.Reason != wire.ErrKeyNotText.Error() {
			t.Errorf("acquire %q: %v, want invalid argument %q", key, err, wire.ErrKeyNotText)
		}
	}
	_, err = cl.AcquireWith(ctx, client.AcquireRequest{Key: "k", Lease: time.Second, Owner: "\xff"})
	if inv := (*client.InvalidArgumentError)(nil); !errors.As(err, &inv) || inv.Reason != "owner must be valid UTF-8" {
		t.Errorf("an owner that is not UTF-8: %v", err)
	}
	_, err = cl.Get(ctx, "u8/\xff\xfe")
	if inv := (*client.InvalidArgumentError)(nil); errors.As(err, &inv) || !errors.Is(err, client.ErrNoMember) {
		t.Errorf("get of a key an older version may have stored: %v, want it sent (to nobody)", err)
	}
}

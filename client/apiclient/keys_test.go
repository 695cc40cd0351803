package apiclient_test

import (
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/nodetest"
)

// Both API clients refuse a new key that breaks the key rule, and an owner
// that is not UTF-8, before sending anything (nothing listens here), with
// the rule's message; and both name a key stored before the rule, not
// UTF-8 (planted below the entries, through the node), losslessly: it is
// listed as itself, read and released (the HTTP client also forces it
// free), where a string field would have named another lock.
func TestAPIClientsKeepTheKeyRuleAndNameOldKeys(t *testing.T) {
	c, apis := nodetest.NewWithAPI(t, 3, nil)
	leader := c.WaitLeader()
	const old = "u8/\xff\xfe"
	for _, proto := range []string{apiclient.ProtocolHTTP, apiclient.ProtocolGRPC} {
		t.Run(proto, func(t *testing.T) {
			newClient := func(eps []string) apiClient {
				var cl apiClient
				var err error
				if proto == apiclient.ProtocolHTTP {
					cl, err = apiclient.NewHTTP(eps, apiclient.Options{})
				} else {
					cl, err = apiclient.NewGRPC(eps, apiclient.Options{})
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() })
				return cl
			}
			ctx := nodetest.Context(t, 30*time.Second)
			nobody := newClient([]string{"127.0.0.1:1"})
			for _, r := range []client.AcquireRequest{{Key: old, Lease: time.Second}, {Key: "a\x00b", Lease: time.Second}, {Key: "k", Lease: time.Second, Owner: "\xff"}} {
				_, err := nobody.AcquireWith(ctx, r)
				var inv *client.InvalidArgumentError
				if !errors.As(err, &inv) || (r.Owner == "" && inv.Reason != wire.ErrKeyNotText.Error()) {
					t.Errorf("acquire %+v: %v, want the key rule's invalid argument", r, err)
				}
			}

			cl := newClient([]string{apis[leader.ID()]})
			tok, err := leader.AcquireAs(ctx, old, "before-the-rule", 10*time.Minute, 0, 0)
			if err != nil {
				t.Fatalf("planting a key from before the rule: %v", err)
			}
			page, err := cl.List(ctx, client.ListOptions{Prefix: "u8/"})
			if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != old || page.Locks[0].Token != tok {
				t.Fatalf("list: %+v, %v", page, err)
			}
			if page, err := cl.List(ctx, client.ListOptions{Prefix: "u8/", After: old}); err != nil || len(page.Locks) != 0 {
				t.Fatalf("list after the old key: %+v, %v", page, err)
			}
			if info, err := cl.Get(ctx, old); err != nil || !info.Held || info.Token != tok || info.Owner != "before-the-rule" {
				t.Fatalf("get: %+v, %v", info, err)
			}
			if err := cl.RenewTagged(ctx, old, tok, time.Minute, 0); err != nil {
				t.Fatalf("renew: %v", err)
			}
			if err := cl.ReleaseTagged(ctx, old, tok, 0); err != nil {
				t.Fatalf("release: %v", err)
			}
			if h, ok := cl.(*apiclient.HTTP); ok {
				tok, err := leader.AcquireAs(ctx, old, "", 10*time.Minute, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := h.ForceReleaseTagged(ctx, old, 0); err != nil || got != tok {
					t.Fatalf("forced release: token %d, %v; want %d", got, err, tok)
				}
			}
			if info, err := cl.Get(ctx, old); err != nil || info.Held {
				t.Fatalf("get after the release: %+v, %v", info, err)
			}
		})
	}
}

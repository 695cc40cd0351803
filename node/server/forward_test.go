package server_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/node/nodetest"
)

// A relayed call carries the identity its member vouches for, and only a
// member may vouch: the ACL judges the caller's identity, never the
// relaying member's, and a client that relays a call "for" another
// identity is refused whatever the call.
func TestOnlyMembersVouchForIdentities(t *testing.T) {
	m := nodetest.StartTLSMember(t, `{"rules":[{"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]},`+
		`{"identity":"batch","prefixes":["jobs/"],"rights":["lock","read"]}]}`, "admin", "batch")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	memberTLS, err := tlsconfig.Files{CA: filepath.Join(m.CertsDir(), "ca.pem"),
		Cert: filepath.Join(m.CertsDir(), "member-1.pem"), Key: filepath.Join(m.CertsDir(), "member-1-key.pem")}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	asMember := client.NewRelay(client.Options{TLS: memberTLS})
	defer asMember.Close()
	asBatch := client.NewRelay(client.Options{TLS: m.ClientTLS(t, "batch")})
	defer asBatch.Close()

	acquire := func(key string) *wire.Request {
		return &wire.Request{ID: 7, Op: wire.OpAcquire, Key: key, LeaseMS: 10000}
	}
	var resp wire.Response
	nodetest.WaitFor(t, 10*time.Second, "a relayed acquire for batch in jobs/", func() bool {
		resp, err = asMember.Forward(ctx, m.Client, "batch", acquire("jobs/a"))
		return err == nil && resp.Op == wire.OpGranted
	})
	if resp.ID != 7 {
		t.Errorf("the relayed answer came under id %d, want the call's own 7", resp.ID)
	}
	// The member itself may not lock outside an ACL rule, and batch may
	// not lock other/: the ACL judges batch.
	if resp, err := asMember.Forward(ctx, m.Client, "batch", acquire("other/a")); err != nil || resp.Op != wire.OpPermissionDenied || !strings.Contains(resp.Reason, `"batch"`) {
		t.Errorf("a relayed acquire for batch outside jobs/: %+v, %v; want permission denied naming batch", resp, err)
	}
	// batch relaying "for admin": refused, whatever it asks.
	force := &wire.Request{ID: 8, Op: wire.OpRelease, Key: "jobs/a", Force: true}
	if resp, err := asBatch.Forward(ctx, m.Client, "admin", force); err != nil || resp.Op != wire.OpPermissionDenied || !strings.Contains(resp.Reason, "only a member") {
		t.Errorf("batch relaying a forced release for admin: %+v, %v; want permission denied", resp, err)
	}
	if info, err := m.Node().Get(ctx, "jobs/a", false); err != nil || !info.Held {
		t.Errorf("jobs/a after the refused forced release: %+v, %v; want still held", info, err)
	}
}

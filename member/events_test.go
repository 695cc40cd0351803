package member

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEveryMemberProducesTheSameEvents: lock events come from applied
// entries, so the three members produce the same sequence at the same
// indexes: a grant, a renew, a handoff to a waiter, a forced release and
// an expiry, and none on a member that is not watching.
func TestEveryMemberProducesTheSameEvents(t *testing.T) {
	c := newCluster(t, 3, nil)
	events := map[uint64][]Event{}
	c.onReady = func(id uint64, ev readyEvent) { events[id] = append(events[id], ev.rd.Events...) }
	c.cores[1].SetWatching(true)
	c.cores[2].SetWatching(true)
	c.elect(1)
	c.check("acquire k", c.call(1, Request{Handle: 1, Op: OpAcquire, Key: "k", Lease: time.Second, Owner: "alice"}), "token 1")
	c.check("renew k", c.call(1, Request{Handle: 2, Op: OpRenew, Key: "k", Token: 1, Lease: 2 * time.Second}), "ok")
	c.submit(1, Request{Handle: 3, Op: OpAcquire, Key: "k", Lease: time.Second, Wait: time.Minute, Owner: "bob"})
	c.check("release k", c.call(1, Request{Handle: 4, Op: OpRelease, Key: "k", Token: 1}), "ok")
	c.check("bob granted", describeAnswer(OpAcquire, c.answer(1, 3)), "token 2")
	c.check("forced release", c.call(1, Request{Handle: 5, Op: OpRelease, Key: "k", Force: true}), "ok")
	c.check("acquire j", c.call(1, Request{Handle: 6, Op: OpAcquire, Key: "j", Lease: 100 * ms}), "token 3")
	for range 100 {
		if len(events[1]) > 0 && events[1][len(events[1])-1].Type == EventExpired {
			break
		}
		c.tick(1, 2, 3)
	}
	var b strings.Builder
	for _, ev := range events[1] {
		fmt.Fprintf(&b, "%s %s token %d owner %q lease %d\n", ev.Type, ev.Key, ev.Token, ev.Owner, ev.LeaseMS)
	}
	want := `granted k token 1 owner "alice" lease 1000
renewed k token 1 owner "alice" lease 2000
released k token 1 owner "alice" lease 2000
granted k token 2 owner "bob" lease 1000
released k token 2 owner "bob" lease 1000
granted j token 3 owner "" lease 100
expired j token 3 owner "" lease 100
`
	if b.String() != want {
		t.Fatalf("leader's events:\n%s\nwant:\n%s", b.String(), want)
	}
	for i := 1; i < len(events[1]); i++ {
		if events[1][i].Index < events[1][i-1].Index {
			t.Fatalf("events out of log order: %+v", events[1])
		}
	}
	if !slices.Equal(events[1], events[2]) {
		t.Fatalf("member 2's events differ from the leader's:\n%+v\n%+v", events[2], events[1])
	}
	if len(events[3]) != 0 {
		t.Fatalf("member 3 is not watching but produced %+v", events[3])
	}
}

// A member that catches up by snapshot never applied the entries it
// covers: while watching, it says so with an EventSnapshot at the
// snapshot's index, after which its events go on as every member's.
func TestSnapshotInstallIsAnEvent(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEvery, cfg.SnapshotKeep = 5, 1 })
	var events []Event
	c.onReady = func(id uint64, ev readyEvent) {
		if id == 3 {
			events = append(events, ev.rd.Events...)
		}
	}
	c.elect(1)
	c.cores[3].SetWatching(true)
	c.down[3] = true
	for h := uint64(1); h <= 20; h++ {
		c.call(1, acquire(h, fmt.Sprintf("k%d", h)))
	}
	c.down[3] = false
	c.waitFor("member 3 to catch up", func() bool { return c.cores[3].Applied() == c.cores[1].Applied() })
	c.check("acquire after", c.call(1, acquire(21, "after")), "token 21")
	if counted(c.cores[3], SnapshotsInstalled) == 0 {
		t.Fatal("member 3 caught up without a snapshot: the test does not test what it names")
	}
	if len(events) < 2 || events[0].Type != EventSnapshot || events[len(events)-1].Key != "after" {
		t.Fatalf("member 3's events: %+v, want a snapshot, then grants up to that of \"after\"", events)
	}
	for i, ev := range events[1:] {
		if ev.Type != EventGranted || ev.Index <= events[i].Index {
			t.Fatalf("member 3's events after its snapshot: %+v", events)
		}
	}
}

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

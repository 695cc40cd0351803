package chaos

import (
	"reflect"
	"testing"

	"github.com/raftlock/raftlock/checker/history"
)

func TestResolveInfo(t *testing.T) {
	ev := func(i int64, p int, typ string) history.Event {
		return history.Event{Index: i, Process: history.Process(p), Type: typ, F: "acquire", Key: "k"}
	}
	events := []history.Event{
		ev(0, 1, history.Invoke), ev(1, 1, history.Info), // tag 1: granted
		ev(2, 2, history.Invoke), ev(3, 2, history.Info), // tag 3: absent
		ev(4, 3, history.Invoke), ev(5, 3, history.OK), // ok: not an info
		ev(6, 4, history.Invoke), ev(7, 4, history.Info), // tag 7: rejected
	}
	log := auditLog{Complete: true, Commands: []auditCommand{
		{Op: "grant", Tag: 1, Status: "Granted", Token: 41},
		{Op: "grant", Tag: 7, Status: "GrantRejected"},
	}}
	want := []Resolution{{Index: 0, Happened: true, Token: 41}, {Index: 2}, {Index: 6}}
	if got := resolveInfo(events, log, true); !reflect.DeepEqual(got, want) {
		t.Fatalf("converged: %+v, want %+v", got, want)
	}
	// Without a final log, absence proves nothing.
	want = []Resolution{{Index: 0, Happened: true, Token: 41}, {Index: 6}}
	if got := resolveInfo(events, log, false); !reflect.DeepEqual(got, want) {
		t.Fatalf("not converged: %+v, want %+v", got, want)
	}
}

package checker

import (
	"reflect"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/checker/history"
)

// auditHistory: process 1 acquires k (ok, token 5, invoke index 0, tag 1),
// process 2's acquire is info (invoke 2, tag 3), process 3's release of
// token 5 is info (invoke 4, tag 5), process 4's renew is info (invoke 6,
// tag 7).
func auditHistory() []history.Event {
	b := &builder{}
	b.add(1, "invoke", "acquire", "k", history.Value{LeaseMS: history.Ptr[int64](60000), WaitMS: history.Ptr[int64](0)})
	b.add(1, "ok", "acquire", "k", history.Value{Token: history.Ptr[uint64](5)})
	b.add(2, "invoke", "acquire", "j", history.Value{LeaseMS: history.Ptr[int64](60000), WaitMS: history.Ptr[int64](0)})
	b.add(2, "info", "acquire", "j", history.Value{})
	b.add(3, "invoke", "release", "k", history.Value{Token: history.Ptr[uint64](5)})
	b.add(3, "info", "release", "k", history.Value{})
	b.add(4, "invoke", "renew", "k", history.Value{Token: history.Ptr[uint64](5), LeaseMS: history.Ptr[int64](1000)})
	b.add(4, "info", "renew", "k", history.Value{})
	return b.events
}

func TestResolveSettlesAcquiresReleasesAndRenewals(t *testing.T) {
	events := auditHistory()
	log := CommittedLog{Final: true, Commands: []LogCommand{
		{Index: 1, Op: "grant", Key: "k", Tag: 1, Status: "Granted", Token: 5},
		{Index: 2, Op: "grant", Key: "j", Tag: 3, Status: "Granted", Token: 6},
		{Index: 3, Op: "release", Key: "k", Tag: 5, Status: "Released"},
	}}
	want := []Resolution{{Index: 2, Happened: true, Token: 6}, {Index: 4, F: "release", Happened: true}, {Index: 6, F: "renew"}}
	if got := Resolve(events, log); !reflect.DeepEqual(got, want) {
		t.Fatalf("final log: %+v, want %+v", got, want)
	}
	// Without a final log, absence proves nothing: the renewal stays unknown.
	log.Final = false
	if got := Resolve(events, log); !reflect.DeepEqual(got, want[:2]) {
		t.Fatalf("not final: %+v, want %+v", got, want[:2])
	}
	// A grant the state machine rejected did not happen.
	log.Commands[1].Status, log.Commands[1].Token = "GrantRejected", 0
	if got := Resolve(events, log); got[0] != (Resolution{Index: 2}) {
		t.Fatalf("rejected grant resolved as %+v, want not happened", got[0])
	}
}

func auditViolations(t *testing.T, events []history.Event, log CommittedLog) []string {
	t.Helper()
	v := Check(events, Options{Log: &log})
	for _, r := range v.Checks {
		if r.Name == "audit" {
			var msgs []string
			for _, x := range r.Violations {
				msgs = append(msgs, x.Message)
			}
			if (r.Status == StatusViolation) != (len(msgs) > 0) || !r.Decides {
				t.Fatalf("audit status %s with %d violations, decides %v", r.Status, len(msgs), r.Decides)
			}
			return msgs
		}
	}
	t.Fatal("no audit check in the verdict")
	return nil
}

func TestAuditFindsWhatTheLogContradicts(t *testing.T) {
	events := auditHistory()
	good := []LogCommand{{Index: 1, Op: "grant", Key: "k", Tag: 1, Status: "Granted", Token: 5}}
	if msgs := auditViolations(t, events, CommittedLog{Final: true, Commands: good}); len(msgs) != 0 {
		t.Fatalf("a consistent log: %v", msgs)
	}
	cases := map[string]struct {
		log  CommittedLog
		want string
	}{
		"a grant the state machine rejected": {CommittedLog{Final: true, Commands: append(good,
			LogCommand{Index: 2, Op: "grant", Key: "j", Tag: 3, Status: "GrantRejected"})}, "rejected a grant"},
		"an acknowledged grant missing from the final log": {CommittedLog{Final: true}, "was lost"},
		"an acknowledged grant applied with another token": {CommittedLog{Final: true, Commands: []LogCommand{
			{Index: 1, Op: "grant", Key: "k", Tag: 1, Status: "Granted", Token: 9}}}, "with token 9"},
	}
	for name, c := range cases {
		msgs := auditViolations(t, events, c.log)
		if len(msgs) == 0 || !strings.Contains(strings.Join(msgs, "\n"), c.want) {
			t.Errorf("%s: violations %v, want one saying %q", name, msgs, c.want)
		}
	}
	// A log that is not final proves nothing by absence.
	if msgs := auditViolations(t, events, CommittedLog{}); len(msgs) != 0 {
		t.Fatalf("absence from a log that is not final: %v", msgs)
	}
	if v := Check(events, Options{}); statusOf(v, "audit") != StatusSkipped {
		t.Fatalf("no log: audit %s, want skipped", statusOf(v, "audit"))
	}
}

// An info release found never applied leaves the history, so it no longer
// excuses a second holder; one found applied stays, as having happened.
func TestResolvedReleasesLeaveOrStay(t *testing.T) {
	ops, _ := Pair(auditHistory())
	out, n := resolve(ops, []Resolution{{Index: 4, F: "release"}, {Index: 6, F: "renew", Happened: true}})
	if n != 2 {
		t.Fatalf("%d resolved, want 2", n)
	}
	for _, o := range out {
		if o.F == "release" {
			t.Fatal("a release that never applied is still in the history")
		}
		if o.F == "renew" && !o.Applied {
			t.Fatal("an applied renewal is not marked applied")
		}
	}
}

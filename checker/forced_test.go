package checker

import (
	"bytes"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/checker/history"
)

func forced() history.Value { return history.Value{Force: true} }

// A forced release ends a hold: a grant that follows it inside the evicted
// holder's lease is no early expiry, and the evicted holder's later
// release answers not-found.
func TestForcedReleaseEndsAHold(t *testing.T) {
	cases := map[string]*builder{
		"forced release names its token": new(builder).
			add(0, "invoke", "acquire", "k", lease(100000)).add(0, "ok", "acquire", "k", tok(1)).
			add(9, "invoke", "release", "k", forced()).add(9, "ok", "release", "k", tok(1)).
			add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(2)).
			add(0, "invoke", "release", "k", tok(1)).add(0, "fail", "release", "k", errv("not-found")),
		"forced release of a free key": new(builder).
			add(9, "invoke", "release", "k", forced()).add(9, "fail", "release", "k", errv("not-found")).
			add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(1)),
		"forced release of unknown outcome": new(builder).
			add(0, "invoke", "acquire", "k", lease(100000)).add(0, "ok", "acquire", "k", tok(1)).
			add(9, "invoke", "release", "k", forced()).add(9, "info", "release", "k", errv("outcome unknown")).
			add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(2)),
		"forced release of a grant nobody saw": new(builder).
			add(0, "invoke", "acquire", "k", lease(100000)).add(0, "info", "acquire", "k", errv("outcome unknown")).
			add(9, "invoke", "release", "k", forced()).add(9, "ok", "release", "k", tok(4)).
			add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(5)),
	}
	wantValid(t, cases)
}

// What a forced release that did not keep rule 12 looks like in a
// history: it claims a release without naming the hold it ended, or names
// a token that did not hold the key, or frees a grant and answers
// not-found.
func TestForcedReleaseViolations(t *testing.T) {
	cases := map[string]violationCase{
		"ok without a holder's token": {new(builder).
			add(0, "invoke", "acquire", "k", lease(100000)).add(0, "ok", "acquire", "k", tok(1)).
			add(9, "invoke", "release", "k", forced()).add(9, "ok", "release", "k", tok(0)), "linearizability"},
		"names a token that did not hold": {new(builder).
			add(0, "invoke", "acquire", "k", lease(100000)).add(0, "ok", "acquire", "k", tok(2)).
			add(9, "invoke", "release", "k", forced()).add(9, "ok", "release", "k", tok(1)), "linearizability"},
		"released a free key": {new(builder).
			add(9, "invoke", "release", "k", forced()).add(9, "ok", "release", "k", tok(1)), "linearizability"},
		"not-found, then the grant it freed is gone": {new(builder).
			add(0, "invoke", "acquire", "k", lease(100000)).add(0, "ok", "acquire", "k", tok(1)).
			add(9, "invoke", "release", "k", forced()).add(9, "fail", "release", "k", errv("not-found")).
			add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(2)), "lease-timing"},
	}
	wantViolations(t, cases)
}

func TestForcedReleaseFormat(t *testing.T) {
	for name, c := range map[string]struct{ lines, err string }{
		"force with a token": {`{"index":0,"time":1,"process":0,"type":"invoke","f":"release","key":"k","value":{"token":1,"force":true}}`,
			"forced release invocation with a token"},
		"ok without its token": {`{"index":0,"time":1,"process":0,"type":"invoke","f":"release","key":"k","value":{"force":true}}
{"index":1,"time":2,"process":0,"type":"ok","f":"release","key":"k","value":{}}`, "without the token it released"},
		"force on an acquire": {`{"index":0,"time":1,"process":0,"type":"invoke","f":"acquire","key":"k","value":{"lease_ms":5,"force":true}}`,
			"acquire invocation with force"},
	} {
		if _, _, err := history.Read(strings.NewReader(c.lines)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", name, err, c.err)
		}
	}
}

func listed(more bool, locks ...history.ListedLock) history.Value {
	return history.Value{Locks: locks, More: history.Ptr(more)}
}

// A list page reads every key in its range: one it shows held by a token
// that no longer held it, or one it leaves out while it was held, is a
// linearizability violation, as for get.
func TestListPagesAreCheckedAsReads(t *testing.T) {
	acquired := func() *builder {
		return new(builder).
			add(0, "invoke", "acquire", "jobs/a", lease(100000)).add(0, "ok", "acquire", "jobs/a", tok(1)).
			add(1, "invoke", "acquire", "jobs/b", lease(100000)).add(1, "ok", "acquire", "jobs/b", tok(2)).
			add(0, "invoke", "release", "jobs/a", tok(1)).add(0, "ok", "release", "jobs/a", history.Value{})
	}
	valid := map[string]*builder{
		"the page as the table is": acquired().
			add(5, "invoke", "list", "jobs/", history.Value{}).add(5, "ok", "list", "jobs/", listed(false, history.ListedLock{Key: "jobs/b", Token: 2})),
		"a cut page says nothing past its last key": acquired().
			add(5, "invoke", "list", "", history.Value{Limit: history.Ptr[int64](1)}).add(5, "ok", "list", "", listed(true, history.ListedLock{Key: "jobs/b", Token: 2})),
		"after skips the keys before it": acquired().
			add(5, "invoke", "list", "jobs/", history.Value{After: "jobs/b"}).add(5, "ok", "list", "jobs/", listed(false)),
	}
	for name, b := range valid {
		if v := Check(b.events, Options{}); v.ExitCode != ExitValid {
			var buf bytes.Buffer
			v.Summary(&buf)
			t.Errorf("%s: exit %d\n%s", name, v.ExitCode, buf.String())
		}
	}
	invalid := map[string]struct {
		b     *builder
		check string
	}{
		"a released lock listed": {acquired().
			add(5, "invoke", "list", "jobs/", history.Value{}).add(5, "ok", "list", "jobs/", listed(false,
			history.ListedLock{Key: "jobs/a", Token: 1}, history.ListedLock{Key: "jobs/b", Token: 2})), "linearizability"},
		// The model lets a lock expire at any point; its lease says when.
		"a held lock left out": {acquired().
			add(5, "invoke", "list", "jobs/", history.Value{}).add(5, "ok", "list", "jobs/", listed(false)), "lease-timing"},
	}
	for name, c := range invalid {
		if v := Check(c.b.events, Options{}); v.ExitCode != ExitViolation || statusOf(v, c.check) != StatusViolation {
			var buf bytes.Buffer
			v.Summary(&buf)
			t.Errorf("%s: exit %d; want a %s violation\n%s", name, v.ExitCode, c.check, buf.String())
		}
	}
	bad := `{"index":0,"time":1,"process":0,"type":"invoke","f":"list","value":{}}
{"index":1,"time":2,"process":0,"type":"ok","f":"list","value":{"locks":[{"key":"b","token":2},{"key":"a","token":1}],"more":false}}`
	if _, _, err := history.Read(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "key order") {
		t.Errorf("a page out of key order: %v", err)
	}
}

// A page that lists locks no operation of the history names (held before
// the run: chaos --held) checks only the history's keys, and a failing
// 250-byte key's visualisation gets a file name the filesystem takes.
func TestListedLocksOutsideTheHistoryAndLongKeys(t *testing.T) {
	long := strings.Repeat("k", 250)
	b := new(builder).
		add(0, "invoke", "acquire", long, lease(100000)).add(0, "ok", "acquire", long, tok(5)).
		add(5, "invoke", "list", "", history.Value{}).add(5, "ok", "list", "", listed(false,
		history.ListedLock{Key: "held-0001", Token: 1}, history.ListedLock{Key: long, Token: 5}))
	if v := Check(b.events, Options{}); v.ExitCode != ExitValid {
		var buf bytes.Buffer
		v.Summary(&buf)
		t.Fatalf("exit %d\n%s", v.ExitCode, buf.String())
	}
	if n := len("lin-" + fileSafe(strings.Repeat("é", 256)) + ".html"); n > 255 {
		t.Fatalf("a visualisation's file name of %d bytes", n)
	}
	if fileSafe(long+"a") == fileSafe(long+"b") {
		t.Fatal("two long keys share a file name")
	}
}

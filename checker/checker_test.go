package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

// builder makes hand-written histories; each event advances time by 1ms
// unless at() moves it.
type builder struct {
	events []history.Event
	now    int64
}

func (b *builder) at(ms int64) *builder { b.now = ms * 1e6; return b }

func (b *builder) add(p int, typ, f, key string, v history.Value) *builder {
	b.now += 1e6
	proc := history.Process(p)
	if p < 0 {
		proc = history.Nemesis
	}
	b.events = append(b.events, history.Event{Index: int64(len(b.events)), Time: b.now, Process: proc, Type: typ, F: f, Key: key, Value: v})
	return b
}

func tok(t uint64) history.Value   { return history.Value{Token: &t} }
func lease(ms int64) history.Value { return history.Value{LeaseMS: &ms, WaitMS: history.Ptr[int64](0)} }
func errv(e string) history.Value  { return history.Value{Error: e} }
func held(t uint64) history.Value  { return history.Value{Held: history.Ptr(true), Token: &t} }
func free() history.Value          { return history.Value{Held: history.Ptr(false)} }
func write(t uint64, v int64) history.Value {
	return history.Value{Token: &t, Value: &v}
}

func statusOf(v *Verdict, name string) string {
	for _, r := range v.Checks {
		if r.Name == name {
			return r.Status
		}
	}
	return "missing"
}

func TestValidHistories(t *testing.T) {
	cases := map[string]*builder{
		"sequential": new(builder).
			add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
			add(0, "invoke", "get", "k", history.Value{}).add(0, "ok", "get", "k", held(1)).
			add(0, "invoke", "release", "k", tok(1)).add(0, "ok", "release", "k", history.Value{}).
			add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(2)).
			add(1, "invoke", "renew", "k", tok(2)).add(1, "ok", "renew", "k", history.Value{}),
		"concurrent acquires, one held": new(builder).
			add(0, "invoke", "acquire", "k", lease(1000)).add(1, "invoke", "acquire", "k", lease(1000)).
			add(1, "fail", "acquire", "k", errv("held")).add(0, "ok", "acquire", "k", tok(5)),
		"info acquire may have happened": new(builder).
			add(0, "invoke", "acquire", "k", lease(100)).add(0, "info", "acquire", "k", errv("outcome-unknown")).
			add(1, "invoke", "get", "k", history.Value{}).add(1, "ok", "get", "k", held(3)).
			at(500).add(2, "invoke", "acquire", "k", lease(100)).add(2, "ok", "acquire", "k", tok(4)),
		"expiry explains a release not-found": new(builder).
			add(0, "invoke", "acquire", "k", lease(10)).add(0, "ok", "acquire", "k", tok(1)).
			at(100).add(0, "invoke", "release", "k", tok(1)).add(0, "fail", "release", "k", errv("not-found")).
			add(1, "invoke", "acquire", "k", lease(10)).add(1, "ok", "acquire", "k", tok(2)),
		"fenced writes": new(builder).
			add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
			add(0, "invoke", "read", "k", tok(1)).add(0, "ok", "read", "k", write(1, 0)).
			add(0, "invoke", "write", "k", write(1, 1)).add(0, "ok", "write", "k", write(1, 1)).
			add(0, "invoke", "release", "k", tok(1)).add(0, "ok", "release", "k", history.Value{}).
			add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(2)).
			add(1, "invoke", "write", "k", write(2, 2)).add(1, "ok", "write", "k", write(2, 2)).
			add(2, "invoke", "write", "k", write(1, 2)).add(2, "fail", "write", "k", errv("stale-token")),
	}
	wantValid(t, cases)
}

// wantValid checks each history and fails the test for each not valid.
func wantValid(t *testing.T, cases map[string]*builder) {
	t.Helper()
	for name, b := range cases {
		v := Check(b.events, Options{})
		if v.ExitCode != ExitValid {
			var buf bytes.Buffer
			v.Summary(&buf)
			t.Errorf("%s: exit %d\n%s", name, v.ExitCode, buf.String())
		}
	}
}

// violationCase is a history and the check it must fail.
type violationCase struct {
	b     *builder
	check string
}

// wantViolations checks each history and fails the test for each that
// is not a violation of its check.
func wantViolations(t *testing.T, cases map[string]violationCase) {
	t.Helper()
	for name, c := range cases {
		v := Check(c.b.events, Options{})
		if v.ExitCode != ExitViolation || statusOf(v, c.check) != StatusViolation {
			var buf bytes.Buffer
			v.Summary(&buf)
			t.Errorf("%s: exit %d, %s = %s; want a %s violation\n%s", name, v.ExitCode, c.check, statusOf(v, c.check), c.check, buf.String())
		}
	}
}

func TestInvalidHistories(t *testing.T) {
	cases := map[string]violationCase{
		"release by a non-holder": {new(builder).
			add(0, "invoke", "acquire", "k", lease(10)).add(0, "ok", "acquire", "k", tok(1)).
			at(100).add(1, "invoke", "acquire", "k", lease(100000)).add(1, "ok", "acquire", "k", tok(2)).
			add(0, "invoke", "release", "k", tok(1)).add(0, "ok", "release", "k", history.Value{}), "linearizability"},
		"stale read after release": {new(builder).
			add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
			add(0, "invoke", "release", "k", tok(1)).add(0, "ok", "release", "k", history.Value{}).
			add(1, "invoke", "get", "k", history.Value{}).add(1, "ok", "get", "k", held(1)), "linearizability"},
		"held answered while free": {new(builder).
			add(1, "invoke", "acquire", "k", lease(1000)).add(1, "fail", "acquire", "k", errv("held")), "linearizability"},
		"duplicate token": {new(builder).
			add(0, "invoke", "acquire", "a", lease(1000)).add(0, "ok", "acquire", "a", tok(7)).
			add(1, "invoke", "acquire", "b", lease(1000)).add(1, "ok", "acquire", "b", tok(7)), "fencing"},
		"token order against real time": {new(builder).
			add(0, "invoke", "acquire", "k", lease(10)).add(0, "ok", "acquire", "k", tok(9)).
			at(100).add(1, "invoke", "acquire", "k", lease(10)).add(1, "ok", "acquire", "k", tok(8)), "fencing"},
		"grant rejected": {new(builder).
			add(0, "invoke", "acquire", "k", lease(10)).add(0, "fail", "acquire", "k", errv("grant-rejected")), "fencing"},
		"second grant inside the first lease": {new(builder).
			add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
			at(200).add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(2)), "lease-timing"},
		"grant inside a renewed lease": {new(builder).
			add(0, "invoke", "acquire", "k", lease(100)).add(0, "ok", "acquire", "k", tok(1)).
			at(50).add(0, "invoke", "renew", "k", history.Value{Token: history.Ptr[uint64](1), LeaseMS: history.Ptr[int64](1000)}).add(0, "ok", "renew", "k", history.Value{}).
			at(300).add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(2)), "lease-timing"},
		"write with a lower token accepted": {new(builder).
			add(0, "invoke", "write", "k", write(5, 1)).add(0, "ok", "write", "k", write(5, 1)).
			add(1, "invoke", "write", "k", write(4, 2)).add(1, "ok", "write", "k", write(4, 2)), "fenced-resource"},
		"lost update": {new(builder).
			add(0, "invoke", "write", "k", write(5, 1)).add(0, "ok", "write", "k", write(5, 1)).
			add(1, "invoke", "write", "k", write(6, 1)).add(1, "ok", "write", "k", write(6, 1)), "fenced-resource"},
	}
	wantViolations(t, cases)
}

func TestClockOverrideMakesLeaseTimingAdvisory(t *testing.T) {
	b := new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
		at(200).add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(2))
	v := Check(b.events, Options{ClockOverride: true})
	if v.ExitCode != ExitValid || statusOf(v, "lease-timing") != StatusViolation {
		t.Fatalf("exit %d, lease-timing %s; want valid with the timing violation reported", v.ExitCode, statusOf(v, "lease-timing"))
	}
	v = Check(b.events, Options{LeaseTolerance: time.Second})
	if statusOf(v, "lease-timing") != StatusOK {
		t.Fatal("tolerance not applied")
	}
}

func TestConvergence(t *testing.T) {
	ok := []NodeDigest{{1, 10, "aa"}, {2, 10, "aa"}, {3, 10, "aa"}}
	if r := checkConvergence(ok); r.Status != StatusOK {
		t.Fatalf("equal digests: %+v", r)
	}
	bad := []NodeDigest{{1, 10, "aa"}, {2, 10, "bb"}, {3, 10, "aa"}}
	if r := checkConvergence(bad); r.Status != StatusViolation {
		t.Fatalf("split digests: %+v", r)
	}
	if r := checkConvergence(nil); r.Status != StatusSkipped {
		t.Fatalf("no digests: %+v", r)
	}
}

func TestReadValidatesFormat(t *testing.T) {
	good := `{"header":{"seed":1}}
{"index":0,"time":1200,"process":3,"type":"invoke","f":"acquire","key":"k1","value":{"lease_ms":1000,"wait_ms":0}}
{"index":1,"time":1300,"process":"nemesis","type":"info","f":"kill","value":{"nodes":[2]}}
{"index":2,"time":9800,"process":3,"type":"ok","f":"acquire","key":"k1","value":{"token":17}}
{"index":3,"time":9900,"process":3,"type":"invoke","f":"release","key":"k1","value":{"token":17}}
{"index":4,"time":9990,"process":3,"type":"ok","f":"release","value":{}}
`
	h, events, err := history.Read(strings.NewReader(good))
	if err != nil || h["seed"] != 1.0 || len(events) != 5 || events[1].Process != history.Nemesis {
		t.Fatalf("read: %v %v %+v", h, err, events)
	}
	for name, bad := range map[string]string{
		"double invoke": `{"index":0,"time":1,"process":1,"type":"invoke","f":"get","key":"k","value":{}}
{"index":1,"time":2,"process":1,"type":"invoke","f":"get","key":"k","value":{}}`,
		"reuse after info": `{"index":0,"time":1,"process":1,"type":"invoke","f":"get","key":"k","value":{}}
{"index":1,"time":2,"process":1,"type":"info","f":"get","key":"k","value":{}}
{"index":2,"time":3,"process":1,"type":"invoke","f":"get","key":"k","value":{}}`,
		"bad type":  `{"index":0,"time":1,"process":1,"type":"maybe","f":"get","key":"k","value":{}}`,
		"bad json":  `{"index":0,`,
		"unknown f": `{"index":0,"time":1,"process":1,"type":"invoke","f":"cas","key":"k","value":{}}`,
	} {
		if _, _, err := history.Read(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A run cut short is partial, with a note saying where; with no
// violation found it is neither valid nor failing (interrupted, 130), and
// a violation found in what it recorded still fails it.
func TestInterruptedVerdict(t *testing.T) {
	valid := new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
		add(1, "invoke", "acquire", "k", lease(1000))
	v := Check(valid.events, Options{})
	v.Interrupted("during the workload, after 2.0s of 30s")
	if v.Valid || v.Verdict != VerdictInterrupted || v.ExitCode != ExitInterrupted || !v.Partial || len(v.Notes) != 1 ||
		!strings.HasPrefix(v.Notes[0], "interrupted during the workload, after 2.0s of 30s") {
		t.Fatalf("interrupted valid run: %+v", v)
	}
	var summary strings.Builder
	v.Summary(&summary)
	if !strings.Contains(summary.String(), "INTERRUPTED") || !strings.Contains(summary.String(), "**Partial**") ||
		!strings.Contains(summary.String(), "Note: interrupted during the workload") {
		t.Errorf("summary:\n%s", summary.String())
	}
	twoHolders := new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
		add(1, "invoke", "acquire", "k", lease(1000)).add(1, "ok", "acquire", "k", tok(1))
	v = Check(twoHolders.events, Options{})
	v.Interrupted("during the workload, after 2.0s of 30s")
	if v.Verdict != VerdictInvalid || v.ExitCode != ExitViolation || !v.Partial {
		t.Fatalf("interrupted run with a violation: verdict %s, exit %d, partial %v", v.Verdict, v.ExitCode, v.Partial)
	}
}

func TestReportsWritten(t *testing.T) {
	b := new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).add(-1, "info", "kill", "", history.Value{Nodes: []int{1}}).
		add(0, "ok", "acquire", "k", tok(1)).add(-1, "info", "start", "", history.Value{Nodes: []int{1}}).
		add(0, "invoke", "release", "k", tok(1)).add(0, "ok", "release", "k", history.Value{}).
		add(1, "invoke", "get", "k", history.Value{}).add(1, "ok", "get", "k", held(1))
	v := Check(b.events, Options{})
	dir := t.TempDir()
	if _, err := v.WriteReports(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"verdict.json", "summary.md", "latency.png", "lin-k.html"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// syntheticHistory is a correct history of n operations over keys keys with
// several concurrent clients per key.
func syntheticHistory(n, keys int) []history.Event {
	b := new(builder)
	var token uint64
	proc := 0
	for len(b.events) < 2*n {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("k%d", k)
			p, q := proc, proc+1
			proc += 2
			token++
			b.add(p, "invoke", "acquire", key, lease(1))
			b.add(q, "invoke", "acquire", key, lease(1))
			b.add(q, "fail", "acquire", key, errv("held"))
			b.add(p, "ok", "acquire", key, tok(token))
			b.add(q, "invoke", "get", key, history.Value{})
			b.add(q, "ok", "get", key, held(token))
			b.add(p, "invoke", "release", key, tok(token))
			b.add(p, "ok", "release", key, history.Value{})
		}
	}
	return b.events
}

func TestCheckerSpeedSmoke(t *testing.T) {
	v := Check(syntheticHistory(20000, 10), Options{})
	if v.ExitCode != ExitValid {
		t.Fatalf("synthetic history: exit %d", v.ExitCode)
	}
}

// BenchmarkCheck100k: the target is a 100,000-operation history
// over 10 keys in under 10 s on the 2-core machine.
func BenchmarkCheck100k(b *testing.B) {
	events := syntheticHistory(100000, 10)
	b.ResetTimer()
	for range b.N {
		if v := Check(events, Options{}); v.ExitCode != ExitValid {
			b.Fatalf("exit %d", v.ExitCode)
		}
	}
}

func TestResolvedInfoAcquires(t *testing.T) {
	// Index 0/1: an info acquire on a; 2/3: an ok grant of token 7 on b.
	b := new(builder).
		add(0, "invoke", "acquire", "a", lease(1000)).add(0, "info", "acquire", "a", errv("outcome unknown")).
		add(1, "invoke", "acquire", "b", lease(1000)).add(1, "ok", "acquire", "b", tok(7))
	if v := Check(b.events, Options{}); v.ExitCode != ExitValid {
		t.Fatalf("unresolved: exit %d", v.ExitCode)
	}
	// The log says the info acquire was granted token 7 too: a duplicate.
	v := Check(b.events, Options{Resolutions: []Resolution{{Index: 0, Happened: true, Token: 7}}})
	if statusOf(v, "fencing") != StatusViolation || v.Stats.Resolved != 1 {
		t.Fatalf("resolved duplicate token: fencing %s, resolved %d", statusOf(v, "fencing"), v.Stats.Resolved)
	}

	// A get sees token 9 that only the info acquire could have produced...
	b = new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).add(0, "info", "acquire", "k", errv("outcome unknown")).
		add(1, "invoke", "get", "k", history.Value{}).add(1, "ok", "get", "k", held(9))
	if v := Check(b.events, Options{}); v.ExitCode != ExitValid {
		t.Fatalf("unresolved: exit %d", v.ExitCode)
	}
	// ...but the committed log says it never happened.
	v = Check(b.events, Options{Resolutions: []Resolution{{Index: 0, Happened: false}}})
	if statusOf(v, "linearizability") != StatusViolation {
		t.Fatalf("resolved as not happened: linearizability %s", statusOf(v, "linearizability"))
	}
}

// verdict.json's "valid" is a JSON boolean, so `jq '.valid == true'` works;
// "verdict" names the three outcomes.
func TestVerdictValidIsABoolean(t *testing.T) {
	dir := t.TempDir()
	if _, err := Check(syntheticHistory(200, 2), Options{}).WriteReports(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "verdict.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["valid"] != true || got["verdict"] != VerdictValid {
		t.Fatalf(`verdict.json has valid=%#v verdict=%#v, want true and "valid"`, got["valid"], got["verdict"])
	}
}

// A member that exited on its own, as the harness reports it, is a
// deciding violation; without process information the check is skipped.
func TestMemberCrashesDecide(t *testing.T) {
	events := syntheticHistory(50, 1)
	if v := Check(events, Options{Crashes: []string{"node 2: panic: state.commit 0 is out of range"}}); v.ExitCode != ExitViolation ||
		statusOf(v, "member-crashes") != StatusViolation {
		t.Fatalf("a crashed member: exit %d, member-crashes %s", v.ExitCode, statusOf(v, "member-crashes"))
	}
	if v := Check(events, Options{Crashes: []string{}}); v.ExitCode != ExitValid || statusOf(v, "member-crashes") != StatusOK {
		t.Fatalf("no crash: exit %d", v.ExitCode)
	}
	v := Check(events, Options{})
	for _, r := range v.Checks {
		if r.Name == "member-crashes" && (r.Status != StatusSkipped || r.Decides) {
			t.Fatalf("no process information: member-crashes %s, decides %v; want skipped, not deciding", r.Status, r.Decides)
		}
	}
}

// A newcomer that did not catch up, or a member that refused a snapshot
// lacking it, as the chaos harness reports it, is a deciding violation;
// without membership information the check is skipped.
func TestNewcomerStuckDecides(t *testing.T) {
	events := syntheticHistory(50, 1)
	if v := Check(events, Options{Newcomers: &Newcomers{Added: 1, Problems: []string{"member 5 refused 3 snapshot(s)"}}}); v.ExitCode != ExitViolation ||
		statusOf(v, "newcomer-stuck") != StatusViolation {
		t.Fatalf("a refused snapshot: exit %d, newcomer-stuck %s", v.ExitCode, statusOf(v, "newcomer-stuck"))
	}
	if v := Check(events, Options{Newcomers: &Newcomers{Added: 2}}); v.ExitCode != ExitValid || statusOf(v, "newcomer-stuck") != StatusOK {
		t.Fatalf("newcomers that caught up: exit %d", v.ExitCode)
	}
	for _, r := range Check(events, Options{}).Checks {
		if r.Name == "newcomer-stuck" && (r.Status != StatusSkipped || r.Decides) {
			t.Fatalf("no membership information: %s, decides %v; want skipped", r.Status, r.Decides)
		}
	}
}

// A member that received snapshot data that does not decode fails the
// run, naming the member and its count, unless the garbage nemesis forged
// at least as many at it; without snapshot metrics the check is skipped.
func TestSnapshotIntegrityDecides(t *testing.T) {
	events := syntheticHistory(50, 1)
	check := func(si *SnapshotIntegrity) (*Verdict, Result) {
		v := Check(events, Options{SnapshotIntegrity: si})
		for _, r := range v.Checks {
			if r.Name == "snapshot-integrity" {
				return v, r
			}
		}
		t.Fatal("no snapshot-integrity check")
		return nil, Result{}
	}
	v, r := check(&SnapshotIntegrity{Corrupt: map[int]int{1: 0, 3: 4}})
	if v.ExitCode != ExitViolation || r.Status != StatusViolation || len(r.Violations) != 1 ||
		!strings.Contains(r.Violations[0].Message, "member 3 received 4 snapshot(s)") {
		t.Fatalf("a corrupt snapshot without garbage: exit %d, %+v", v.ExitCode, r)
	}
	if v, r := check(&SnapshotIntegrity{Corrupt: map[int]int{3: 4}, Forged: map[int]int{3: 4}}); v.ExitCode != ExitValid || r.Status != StatusOK ||
		!strings.Contains(r.Note, "member 3 4 of 4") {
		t.Fatalf("as many as the garbage forged: exit %d, %+v", v.ExitCode, r)
	}
	if v, r := check(&SnapshotIntegrity{Corrupt: map[int]int{3: 4}, Forged: map[int]int{2: 9, 3: 3}}); v.ExitCode != ExitViolation ||
		!strings.Contains(r.Violations[0].Message, "more than the 3") {
		t.Fatalf("more than the garbage forged at that member: exit %d, %+v", v.ExitCode, r)
	}
	if v, _ := check(&SnapshotIntegrity{Corrupt: map[int]int{1: 0, 2: 0}}); v.ExitCode != ExitValid {
		t.Fatalf("no corrupt snapshot: exit %d", v.ExitCode)
	}
	if _, r := check(nil); r.Status != StatusSkipped || r.Decides {
		t.Fatalf("no snapshot metrics: %s, decides %v; want skipped", r.Status, r.Decides)
	}
}

// A backup that lacks a lock operation acknowledged before it was asked
// for (a lower last token, or on a key an older lock than the latest
// acknowledged there, or the lock of an acknowledged release) fails the
// run, naming the backup and the operation; one asked for before the
// acknowledgement, or lacking a lock that may have expired since, passes;
// without backups the check is skipped.
func TestBackupFreshnessDecides(t *testing.T) {
	events := new(builder).
		add(0, "invoke", "acquire", "a", lease(1000)).add(0, "ok", "acquire", "a", tok(1)).     // 1-2ms
		add(1, "invoke", "acquire", "b", lease(1000)).add(1, "ok", "acquire", "b", tok(2)).     // 3-4ms
		add(0, "invoke", "release", "a", tok(1)).add(0, "ok", "release", "a", history.Value{}). // 5-6ms
		events
	at := func(ms int64) int64 { return ms * 1e6 }
	check := func(bs ...Backup) Result {
		t.Helper()
		v := Check(events, Options{Backups: bs})
		for _, r := range v.Checks {
			if r.Name == "backup-freshness" {
				if (r.Status == StatusViolation) != (v.ExitCode == ExitViolation) {
					t.Fatalf("backup-freshness %s but exit %d", r.Status, v.ExitCode)
				}
				return r
			}
		}
		t.Fatal("no backup-freshness check")
		return Result{}
	}
	ok := []Backup{
		{Member: 2, Invoked: at(10), Completed: at(11), Index: 9, LastToken: 2, Locks: map[string]uint64{"b": 2}},
		{Member: 2, Invoked: at(10), Completed: at(11), Index: 9, LastToken: 2, Locks: map[string]uint64{}}, // b expired since
		{Member: 1, Invoked: at(3), Completed: at(11), Index: 5, LastToken: 1, Locks: map[string]uint64{"a": 1}},
	}
	if r := check(ok...); r.Status != StatusOK {
		t.Fatalf("fresh backups: %+v", r)
	}
	r := check(Backup{Member: 1, Invoked: at(10), Completed: at(11), Index: 5, LastToken: 1, Locks: map[string]uint64{"a": 1}})
	if r.Status != StatusViolation || len(r.Violations) != 2 {
		t.Fatalf("a backup older than the grant of b and the release of a: %+v", r)
	}
	for i, want := range []string{"last token 1, but token 2 was acknowledged", `holds "a" with token 1`} {
		if msg := r.Violations[i].Message; !strings.Contains(msg, "member 1 answered at index 5") || !strings.Contains(msg, want) {
			t.Errorf("violation %q does not name the backup and say %q", msg, want)
		}
	}
	if ev := r.Violations[1].Events; len(ev) != 2 || ev[0].F != "release" {
		t.Errorf("the release's events are not cited: %+v", ev)
	}
	if r := check(Backup{Member: 3, Invoked: at(10), LastToken: 2, Locks: map[string]uint64{"a": 1}}); r.Status != StatusViolation ||
		len(r.Violations) != 1 || r.Violations[0].Key != "a" {
		t.Fatalf("a backup holding a released lock: %+v", r)
	}
	if r := check(); r.Status != StatusSkipped || r.Decides {
		t.Fatalf("no backups: %s, decides %v; want skipped", r.Status, r.Decides)
	}
}

// A linearizability violation names where the search failed: the last
// operation the longest order found could place and the one it could not
// place after it, with their events, not only the count of operations.
func TestLinearizabilityViolationNamesTheFailurePoint(t *testing.T) {
	b := new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
		add(0, "invoke", "release", "k", tok(1)).add(0, "ok", "release", "k", history.Value{}).
		add(1, "invoke", "get", "k", history.Value{}).add(1, "ok", "get", "k", held(1))
	v := Check(b.events, Options{})
	for _, r := range v.Checks {
		if r.Name != "linearizability" {
			continue
		}
		if len(r.Violations) != 1 {
			t.Fatalf("violations: %+v", r.Violations)
		}
		got := r.Violations[0]
		t.Log(got.Message)
		for _, want := range []string{`no linearization of its 3 operations exists`, `places 2, the last release(1) on "k"`, `cannot place get() on "k" -> held by 1`} {
			if !strings.Contains(got.Message, want) {
				t.Errorf("message %q lacks %q", got.Message, want)
			}
		}
		if len(got.Events) != 4 {
			t.Errorf("events: %d, want the two operations' invocations and completions", len(got.Events))
		}
		return
	}
	t.Fatal("no linearizability result")
}

// One stale write accepted by an unfenced register is one incident, though
// it shows as three violations: its token, the update it overwrote, and the
// honest holder's next write, which finds the counter the stale one left.
// A later, separate stale write is a second incident.
func TestStaleWriteViolationsAreOneIncident(t *testing.T) {
	rd := func(tk uint64) history.Value { return history.Value{Token: &tk} }
	b := new(builder).
		add(0, "invoke", "write", "r", write(1, 1)).add(0, "ok", "write", "r", write(1, 1)).
		add(1, "invoke", "write", "r", write(2, 2)).add(1, "ok", "write", "r", write(2, 2)).
		// holder 1 (token 1, paused past its lease) writes 2 again: stale and lost
		add(0, "invoke", "write", "r", write(1, 2)).add(0, "ok", "write", "r", write(1, 2)).
		add(1, "invoke", "read", "r", rd(2)).add(1, "ok", "read", "r", rd(2)).
		add(1, "invoke", "write", "r", write(2, 4)).add(1, "ok", "write", "r", write(2, 4)).
		add(1, "invoke", "write", "r", write(2, 5)).add(1, "ok", "write", "r", write(2, 5)).
		add(0, "invoke", "write", "r", write(1, 6)).add(0, "ok", "write", "r", write(1, 6))
	v := Check(b.events, Options{})
	for _, r := range v.Checks {
		if r.Name != "fenced-resource" {
			continue
		}
		if len(r.Violations) != 4 || r.Incidents != 2 {
			t.Fatalf("%d violations in %d incidents, want 4 in 2: %+v", len(r.Violations), r.Incidents, r.Violations)
		}
		want := []int{1, 1, 1, 2}
		for i, vi := range r.Violations {
			if vi.Incident != want[i] {
				t.Errorf("violation %d (%s) in incident %d, want %d", i, vi.Message, vi.Incident, want[i])
			}
		}
		if !strings.Contains(r.Note, "4 violations in 2 incidents") {
			t.Errorf("note %q", r.Note)
		}
		return
	}
	t.Fatal("no fenced-resource result")
}

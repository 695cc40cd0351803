package checker

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlock/raftlock/checker/history"
)

// soundnessClasses are the classes of issue 9. Each has, in testdata/, a
// NAME-fail.jsonl history that the named check must flag and a
// NAME-pass.jsonl one, as close to it as the class allows, that must read
// valid; NAME-VARIANT.resolved.json, when present, holds the post-run
// audit's resolutions for that history, and NAME-VARIANT.log.json the
// committed log the audit check holds it against.
var soundnessClasses = []struct {
	name, check, why string
}{
	{"lease-every-pair", "lease-timing", "a later grant is compared with every earlier one, not only its predecessor"},
	{"renewal-returns-late", "lease-timing", "a successful renewal extends the lease even when it returns after the next grant"},
	{"release-other-key", "lease-timing", "a release excuses only its own (key, token)"},
	{"token-two-keys", "fencing", "a token seen through get belongs to one key"},
	{"token-order-across-keys", "fencing", "tokens grow in real time over all keys"},
	{"premature-expiry-get", "lease-timing", "a free read inside a surely live lease is an early expiry"},
	{"premature-expiry-release", "lease-timing", "a not-found release inside a surely live lease is an early expiry"},
	{"resolved-grant-between", "lease-timing", "a resolved grant never hides a comparison"},
	{"clock-outside-window", "lease-timing", "timing decides outside clock fault windows"},
	{"clock-inside-window", "lease-timing", "inside a window, timing is held to the fastest injected clock and its jumps"},
	{"clock-restart-heals", "lease-timing", "a restarted member runs a normal clock"},
	{"clock-slow", "lease-timing", "slow clocks and backward steps never excuse an early grant"},
	{"ghost-grant", "lease-timing", "only a grant its client heard promises a lease; a ghost may be released at once"},
	{"ghost-shown", "lease-timing", "a grant whose client gave up promises its lease once a read showed it held (rule 7)"},
	{"audit-grant-rejected", "audit", "a GrantRejected in the committed log violates the grant rule"},
	{"audit-lost-grant", "audit", "an acknowledged grant missing from the final log was lost"},
	{"audit-unapplied-release", "lease-timing", "an info release the log shows never applied excuses no second holder"},
}

// readTestdata reads testdata/NAME.jsonl.
func readTestdata(t *testing.T, name string) []history.Event {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, events, err := history.Read(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return events
}

func checkFile(t *testing.T, name string) *Verdict {
	t.Helper()
	events := readTestdata(t, name)
	var opts Options
	b, err := os.ReadFile(filepath.Join("testdata", name+".resolved.json"))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &opts.Resolutions); err != nil {
			t.Fatalf("%s resolutions: %v", name, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		t.Fatal(err)
	}
	b, err = os.ReadFile(filepath.Join("testdata", name+".log.json"))
	switch {
	case err == nil:
		opts.Log = &CommittedLog{}
		if err := json.Unmarshal(b, opts.Log); err != nil {
			t.Fatalf("%s committed log: %v", name, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		t.Fatal(err)
	}
	return Check(events, opts)
}

func summary(v *Verdict) string {
	var buf bytes.Buffer
	v.Summary(&buf)
	return buf.String()
}

func TestSoundnessClassesFailingHistoriesAreFlaggedByTheirCheck(t *testing.T) {
	for _, c := range soundnessClasses {
		t.Run(c.name, func(t *testing.T) {
			v := checkFile(t, c.name+"-fail")
			if v.ExitCode != ExitViolation || statusOf(v, c.check) != StatusViolation {
				t.Errorf("%s: exit %d, %s %s; want a %s violation\n%s", c.why, v.ExitCode, c.check, statusOf(v, c.check), c.check, summary(v))
			}
		})
	}
}

func TestSoundnessClassesPassingHistoriesAreValid(t *testing.T) {
	for _, c := range soundnessClasses {
		t.Run(c.name, func(t *testing.T) {
			v := checkFile(t, c.name+"-pass")
			if v.ExitCode != ExitValid {
				t.Errorf("%s: exit %d, want valid\n%s", c.why, v.ExitCode, summary(v))
			}
		})
	}
}

// Adding the committed log's answer must never remove a check: the
// history with the resolved middle grant is caught with and without it.
func TestResolutionNeverHidesAViolation(t *testing.T) {
	events := readTestdata(t, "resolved-grant-between-fail")
	if v := Check(events, Options{}); statusOf(v, "lease-timing") != StatusViolation {
		t.Errorf("unresolved: lease-timing %s, want violation\n%s", statusOf(v, "lease-timing"), summary(v))
	}
}

// A resolved grant's return is bounded by the first operation that saw its
// token, or a higher one, on its key.
func TestResolvedGrantReturnIsBoundedByLaterSightings(t *testing.T) {
	b := new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).
		add(1, "invoke", "get", "k", history.Value{}).add(1, "ok", "get", "k", held(4)).
		add(0, "info", "acquire", "k", errv("outcome unknown"))
	v := Check(b.events, Options{Resolutions: []Resolution{{Index: 0, Happened: true, Token: 4}}})
	var op *Op
	for _, o := range v.ops {
		if o.Invoke.Index == 0 {
			op = o
		}
	}
	if op == nil || op.Return() != b.events[2].Time {
		t.Fatalf("resolved grant returns at %v, want %d (the get that saw token 4)", op, b.events[2].Time)
	}
}

// A history with no client operation proves nothing: unknown, never valid,
// whether it comes from a file or straight from the chaos harness.
func TestNothingToCheckIsUnknown(t *testing.T) {
	for _, events := range [][]history.Event{nil, {nemesis(10, "kill", history.Value{Nodes: []int{1}})}} {
		if v := Check(events, Options{}); v.ExitCode != ExitUnknown || v.Valid || v.Verdict != VerdictUnknown {
			t.Errorf("%d events: exit %d, valid %v, verdict %q; want unknown", len(events), v.ExitCode, v.Valid, v.Verdict)
		}
	}
}

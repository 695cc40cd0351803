package history

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readFile(t *testing.T, name string) (map[string]any, []Event, error) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Read(f)
}

func TestReadAcceptsEveryNemesisFamilyAndUnknownOnes(t *testing.T) {
	h, events, err := readFile(t, "well-formed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if h["seed"] != 7.0 || len(events) != 11 {
		t.Fatalf("header %v, %d events", h, len(events))
	}
	if e := events[4]; e.F != "loss" || e.Value.Loss == nil || *e.Value.Loss != 0.2 || len(e.Value.Links) != 1 {
		t.Fatalf("loss event read as %+v", e)
	}
}

// The garbage family's window (garbage.go in chaos) reads back with the
// members it targeted.
func TestReadAcceptsGarbageWindows(t *testing.T) {
	text := `{"index":0,"time":1,"process":"nemesis","type":"info","f":"garbage","value":{"nodes":[1,3]}}` + "\n" +
		`{"index":1,"time":2,"process":"nemesis","type":"info","f":"garbage-end","value":{"nodes":[1,3]}}` + "\n"
	_, events, err := Read(strings.NewReader(text))
	if err != nil || len(events) != 2 || events[1].F != "garbage-end" || len(events[1].Value.Nodes) != 2 {
		t.Fatalf("read %+v, %v", events, err)
	}
}

// Each malformed history is refused with the line at fault and what is
// wrong with it, never read as something else.
func TestReadRefusesMalformedHistoriesNamingTheLine(t *testing.T) {
	for name, want := range map[string]string{
		"malformed-two-objects-one-line.jsonl":         "line 2: unexpected text after the event",
		"malformed-trailing-garbage.jsonl":             "line 2: unexpected text after the event",
		"malformed-acquire-without-lease.jsonl":        "line 2: acquire invocation without a positive lease_ms",
		"malformed-time-backwards.jsonl":               "line 3: time 4000000 goes backwards",
		"malformed-completion-before-invocation.jsonl": "line 2: completion at time 4000000 stamped before its invocation",
	} {
		_, _, err := readFile(t, name)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", name, err, want)
		}
	}
}

func TestReadRefusesMissingFieldsAndBadNemesisEvents(t *testing.T) {
	const inv = `{"index":0,"time":1,"process":1,"type":"invoke","f":"acquire","key":"k","value":{"lease_ms":10}}` + "\n"
	for name, tc := range map[string]struct{ text, want string }{
		"ok acquire without a token": {inv + `{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","value":{}}`, "ok acquire without a token"},
		"renew without a lease":      {`{"index":0,"time":1,"process":1,"type":"invoke","f":"renew","key":"k","value":{"token":1}}`, "renew invocation without a positive lease_ms"},
		"release without a token":    {`{"index":0,"time":1,"process":1,"type":"invoke","f":"release","key":"k","value":{}}`, "release invocation without a token"},
		"get held without a token": {`{"index":0,"time":1,"process":1,"type":"invoke","f":"get","key":"k","value":{}}` + "\n" +
			`{"index":1,"time":2,"process":1,"type":"ok","f":"get","value":{"held":true}}`, "ok get held without a token"},
		"clock without a rate":     {`{"index":0,"time":1,"process":"nemesis","type":"info","f":"clock","value":{"node":1}}`, "nemesis clock without node and rate"},
		"kill without nodes":       {`{"index":0,"time":1,"process":"nemesis","type":"info","f":"kill","value":{}}`, "nemesis kill without nodes"},
		"garbage without nodes":    {`{"index":0,"time":1,"process":"nemesis","type":"info","f":"garbage","value":{}}`, "nemesis garbage without nodes"},
		"index repeated":           {inv + `{"index":0,"time":2,"process":1,"type":"ok","f":"acquire","value":{"token":1}}`, "index 0 does not follow index 0"},
		"second header after data": {inv + `{"header":{"seed":1}}`, "line 2: a header may only be the first line"},
	} {
		_, _, err := Read(strings.NewReader(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		}
	}
}

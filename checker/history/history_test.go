package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
		"power-cut without cut":    {`{"index":0,"time":1,"process":"nemesis","type":"info","f":"power-cut","value":{"node":1}}`, "nemesis power-cut without node and cut"},
		"index repeated":           {inv + `{"index":0,"time":2,"process":1,"type":"ok","f":"acquire","value":{"token":1}}`, "index 0 does not follow index 0"},
		"second header after data": {inv + `{"header":{"seed":1}}`, "line 2: a header may only be the first line"},
	} {
		_, _, err := Read(strings.NewReader(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		}
	}
}

// lineWriter keeps each Write it is given.
type lineWriter struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, bytes.Clone(b))
	return len(b), nil
}

// record records procs clients' rounds of acquires, and the nemesis's
// pauses, from several goroutines at once, as the harness's clients and
// nemesis do.
func record(t *testing.T, w io.Writer, procs, rounds int) *Recorder {
	t.Helper()
	rec, err := NewRecorder(w, map[string]any{"seed": 5, "keys": []string{"k1", "k2"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for p := range procs {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("k%d", 1+i%2)
				rec.Record(Process(p), Invoke, OpAcquire, key, Value{LeaseMS: Ptr[int64](100), Owner: strings.Repeat("o", p*40)})
				rec.Record(Process(p), Fail, OpAcquire, key, Value{Error: "held"})
			}
		})
	}
	wg.Go(func() {
		for range rounds {
			rec.Record(Nemesis, Info, FaultPause, "", Value{Nodes: []int{2}})
			rec.Record(Nemesis, Info, FaultResume, "", Value{Nodes: []int{2}})
		}
	})
	wg.Wait()
	return rec
}

// Each line of a history, the header's and every event's, reaches the
// writer whole in one Write: a harness stopped between two writes, even
// killed, leaves only whole lines, and a history file is never cut at a
// buffer's boundary.
func TestRecorderWritesEachLineWhole(t *testing.T) {
	var w lineWriter
	rec := record(t, &w, 8, 25)
	if len(w.writes) != 1+len(rec.Events()) {
		t.Fatalf("%d writes for a header and %d events", len(w.writes), len(rec.Events()))
	}
	for i, b := range w.writes {
		if bytes.IndexByte(b, '\n') != len(b)-1 || !json.Valid(b) {
			t.Fatalf("write %d is not one whole line: %q", i, b)
		}
	}
	if f, err := Parse(bytes.NewReader(bytes.Join(w.writes, nil))); err != nil || f.Cut != 0 || len(f.Events) != len(rec.Events()) {
		t.Fatalf("read back %d of %d events, cut %d: %v", len(f.Events), len(rec.Events()), f.Cut, err)
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
}

// A history cut at any byte (a writer killed in the middle of a line, as
// a full disk or a kernel's short write may leave it) reads as the whole
// lines before the cut: the cut last line is dropped and named, never a
// malformed history.
func TestParseDropsALastLineCutShort(t *testing.T) {
	var w lineWriter
	record(t, &w, 2, 3)
	text := bytes.Join(w.writes, nil)
	for n := range len(text) + 1 {
		f, err := Parse(bytes.NewReader(text[:n]))
		if err != nil {
			t.Fatalf("cut at byte %d of %d: %v", n, len(text), err)
		}
		lines := bytes.Count(text[:n], []byte("\n")) // ended within the cut
		cut := 0
		if rest := text[bytes.LastIndexByte(text[:n], '\n')+1 : n]; json.Valid(rest) {
			lines++ // all of a line but its newline: whole
		} else if len(rest) > 0 {
			cut = lines + 1
		}
		events := max(lines-1, 0) // the first line is the header
		if len(f.Events) != events || f.Cut != cut || (f.Header != nil) != (lines > 0) {
			t.Fatalf("cut at byte %d: %d events, cut line %d, header %v; want %d events, cut line %d", n, len(f.Events), f.Cut, f.Header, events, cut)
		}
	}
}

// Only a last line cut short is dropped: one cut short before another
// line, or a last line that is whole and wrong, is refused as before.
func TestParseRefusesWhatACutDoesNotLeave(t *testing.T) {
	const inv = `{"index":0,"time":1,"process":1,"type":"invoke","f":"acquire","key":"k","value":{"lease_ms":10}}`
	for name, tc := range map[string]struct{ text, want string }{
		"a cut line before another": {inv[:40] + "\n" + inv + "\n", "line 1: unexpected EOF"},
		"text after the last event": {inv + " garbage", "line 1: unexpected text after the event"},
		"a last line without a key": {`{"index":0,"time":1,"process":1,"type":"invoke","f":"acquire","value":{"lease_ms":10}}`, "line 1: invocation without a key"},
	} {
		if f, err := Parse(strings.NewReader(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: read %+v, %v; want an error with %q", name, f, err, tc.want)
		}
	}
}

// Read, for a reader that wants every line, refuses the last line cut
// short that Parse drops and names.
func TestReadRefusesALastLineCutShort(t *testing.T) {
	const inv = `{"index":0,"time":1,"process":1,"type":"invoke","f":"acquire","key":"k","value":{"lease_ms":10}}` + "\n"
	if _, _, err := Read(strings.NewReader(inv + inv[:30])); err == nil || !strings.Contains(err.Error(), "line 2: unexpected EOF") {
		t.Fatalf("read a history cut short: %v", err)
	}
	if f, err := Parse(strings.NewReader(inv + inv[:30])); err != nil || f.Cut != 2 || len(f.Events) != 1 {
		t.Fatalf("parse a history cut short: %+v, %v", f, err)
	}
}

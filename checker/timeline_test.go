package checker

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/checker/history"
)

// timelineOf writes the reports of events and returns timeline.html, its
// embedded data and the names WriteReports returned.
func timelineOf(t *testing.T, events []history.Event) (page string, data timelineJSON, written []string) {
	t.Helper()
	dir := t.TempDir()
	written, err := Check(events, Options{}).WriteReports(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "timeline.html"))
	if err != nil {
		t.Fatal(err)
	}
	page = string(b)
	m := regexp.MustCompile(`(?s)<script type="application/json" id="data">(.*?)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("timeline.html holds no data")
	}
	if err := json.Unmarshal([]byte(m[1]), &data); err != nil {
		t.Fatalf("timeline data: %v", err)
	}
	return page, data, written
}

type timelineJSON struct {
	End     float64  `json:"end"`
	Procs   []int    `json:"procs"`
	Kinds   []string `json:"kinds"`
	Ops     [][]any  `json:"ops"`
	Windows [][]any  `json:"windows"`
	Lin     []string `json:"lin"`
	Fs      []string `json:"fs"`
	Keys    []string `json:"keys"`
}

// faultyHistory has ok, fail and info operations of four processes, a kill
// window and a partition window.
func faultyHistory() []history.Event {
	return new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).add(-1, "info", "kill", "", history.Value{Nodes: []int{1}}).
		add(0, "ok", "acquire", "k", tok(1)).add(-1, "info", "start", "", history.Value{Nodes: []int{1}}).
		add(1, "invoke", "acquire", "k", lease(1000)).add(1, "fail", "acquire", "k", errv("held")).
		add(-1, "info", "partition", "", history.Value{Groups: [][]int{{1}, {2, 3}}}).
		add(0, "invoke", "release", "k", tok(1)).add(0, "info", "release", "k", history.Value{}).
		add(-1, "info", "heal", "", history.Value{}).
		add(2, "invoke", "get", "k", history.Value{}).add(2, "ok", "get", "k", free()).
		add(3, "invoke", "acquire", "j", lease(1000)).events
}

// timeline.html is written by every report, stands alone (no script,
// style or font fetched from elsewhere) and holds every operation with
// its outcome and every fault window.
func TestTimelineWrittenAndSelfContained(t *testing.T) {
	page, data, written := timelineOf(t, faultyHistory())
	if !slices.Contains(written, "timeline.html") {
		t.Errorf("WriteReports returned %v, without timeline.html", written)
	}
	for _, bad := range []string{"src=", "http://", "https://", "@import", "url(", "<link"} {
		if strings.Contains(page, bad) {
			t.Errorf("timeline.html contains %q: it must not load anything", bad)
		}
	}
	if len(data.Ops) != 5 || len(data.Procs) != 4 {
		t.Fatalf("%d operations by %d processes, want 5 by 4", len(data.Ops), len(data.Procs))
	}
	types := map[float64]int{}
	for _, o := range data.Ops {
		types[o[3].(float64)]++
	}
	if types[0] != 2 || types[1] != 1 || types[2] != 2 {
		t.Errorf("types ok/fail/info = %d/%d/%d, want 2/1/2", types[0], types[1], types[2])
	}
	if !slices.Contains(data.Kinds, "kill") || !slices.Contains(data.Kinds, "partition") || len(data.Windows) != 2 {
		t.Errorf("kinds %v, %d windows; want kill and partition", data.Kinds, len(data.Windows))
	}
	// The acquire of client 3 never completed: drawn to the end of the run.
	last := data.Ops[len(data.Ops)-1]
	if last[2].(float64) != -1 || data.End < last[1].(float64) {
		t.Errorf("unanswered op %v, end %v", last, data.End)
	}
}

// A large history still gets its timeline, every operation in it, at a
// size that opens in a browser, while porcupine's visualisation is kept
// to failing keys.
func TestTimelineOfALargeHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("large history")
	}
	events := syntheticHistory(20000, 10)
	_, data, written := timelineOf(t, events)
	ops := 0
	for _, e := range events {
		if e.Type == history.Invoke {
			ops++
		}
	}
	if len(data.Ops) != ops {
		t.Errorf("%d operations in the timeline, want %d", len(data.Ops), ops)
	}
	for _, name := range written {
		if strings.HasPrefix(name, "lin-") {
			t.Errorf("valid large history got %s", name)
		}
	}
}

// The page's script runs: node executes it against a stub DOM, drawing,
// hovering, zooming, panning and resetting, so a script error cannot ship
// unnoticed. Skipped without node.
func TestTimelineScriptRuns(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	dir := t.TempDir()
	if _, err := Check(faultyHistory(), Options{}).WriteReports(dir); err != nil {
		t.Fatal(err)
	}
	harness := filepath.Join(dir, "harness.js")
	if err := os.WriteFile(harness, []byte(stubDOM), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, harness, filepath.Join(dir, "timeline.html")).CombinedOutput()
	if err != nil {
		t.Fatalf("timeline script: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "client 0: acquire k → ok") {
		t.Errorf("hovering the first operation did not describe it:\n%s", out)
	}
}

// stubDOM runs timeline.html's script in node with just enough of a
// browser: a canvas whose context accepts every call, and the events the
// page listens to.
const stubDOM = `
const fs = require("fs");
const page = fs.readFileSync(process.argv[2], "utf8");
const data = page.match(/<script type="application\/json" id="data">([\s\S]*?)<\/script>/)[1];
const code = page.match(/<script>([\s\S]*?)<\/script>/)[1];
const ctx = new Proxy({}, { get: (t, p) => (p in t ? t[p] : () => {}), set: (t, p, v) => { t[p] = v; return true; } });
const listeners = {};
const element = (id) => ({
  id, style: {}, textContent: id === "data" ? data : "", parentNode: { clientWidth: 1000 },
  getContext: () => ctx, appendChild() {},
  addEventListener(type, fn) { listeners[type] = fn; },
});
const elements = {};
global.document = {
  getElementById: (id) => (elements[id] = elements[id] || element(id)),
  createElement: (tag) => element(tag),
  createTextNode: (s) => ({ s }),
};
global.window = { devicePixelRatio: 2, addEventListener(type, fn) { listeners["window:" + type] = fn; } };
eval(code);
const ev = (x, y, extra) => Object.assign({ offsetX: x, offsetY: y, deltaY: -100, shiftKey: false, preventDefault() {} }, extra);
// The first operation starts at 1 ms of a run of about 14 ms, in row 0.
const end = JSON.parse(data).end, x = 64 + (1.5 / end) * (1000 - 72);
listeners.mousemove(ev(x, 10));
console.log(elements.tip.textContent);
listeners.wheel(ev(500, 50));
listeners.wheel(ev(500, 50, { shiftKey: true }));
listeners.mousedown(ev(500, 50));
listeners.mousemove(ev(400, 80));
listeners["window:mouseup"]();
listeners.dblclick();
listeners.mouseleave();
listeners["window:resize"]();
`

// latency.png's log axis copes with what a linear one never minded: one
// answered operation (a range of one value), a zero latency, and none.
func TestLatencyPlotOnALogAxis(t *testing.T) {
	for name, events := range map[string][]history.Event{
		"one op": new(builder).add(0, "invoke", "get", "k", history.Value{}).add(0, "ok", "get", "k", free()).events,
		"zero latency": {
			{Index: 0, Time: 5, Process: 0, Type: "invoke", F: "get", Key: "k"},
			{Index: 1, Time: 5, Process: 0, Type: "ok", F: "get", Key: "k", Value: free()},
		},
		"unanswered only": new(builder).add(0, "invoke", "acquire", "k", lease(10)).events,
	} {
		path := filepath.Join(t.TempDir(), "latency.png")
		if err := Check(events, Options{}).plotLatency(path); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() == 0 {
			t.Errorf("%s: no plot: %v", name, err)
		}
	}
}

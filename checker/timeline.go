package checker

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/checker/history"
)

// timelinePage is timeline.html's template: {{verdict}}, {{summary}} and
// {{data}} are replaced.
//
//go:embed timeline.html
var timelinePage string

// timelineData is what timeline.html draws, in a compact form: times are
// milliseconds since the run began, and each operation is one array, so a
// history of a few hundred thousand operations stays a few megabytes.
type timelineData struct {
	End   float64  `json:"end"`   // the last event
	Procs []int    `json:"procs"` // process id of each row
	Fs    []string `json:"fs"`
	Keys  []string `json:"keys"`
	// Ops: [row, invoke, complete (-1: never), type (0 ok, 1 fail,
	// 2 info), f index, key index, detail].
	Ops   [][]any  `json:"ops"`
	Kinds []string `json:"kinds"`
	// Windows: [kind index, start, end, detail].
	Windows [][]any  `json:"windows"`
	Lin     []string `json:"lin"` // porcupine visualisations written beside it
}

// millis converts a history time to milliseconds, to the microsecond.
func millis(ns int64) float64 { return math.Round(float64(ns)/1e3) / 1e3 }

// timeline gathers the operations and fault windows for timeline.html.
func (v *Verdict) timeline(lin []string) timelineData {
	d := timelineData{Lin: lin, Ops: [][]any{}, Windows: [][]any{}, Procs: []int{}, Fs: []string{}, Keys: []string{}, Kinds: []string{}}
	index := func(list *[]string, s string) int {
		i := slices.Index(*list, s)
		if i < 0 {
			*list = append(*list, s)
			i = len(*list) - 1
		}
		return i
	}
	rows := map[history.Process]int{}
	var procs []int
	var end int64
	for _, o := range v.ops {
		if _, ok := rows[o.Process]; !ok {
			rows[o.Process] = 0
			procs = append(procs, int(o.Process))
		}
		end = max(end, o.Invoke.Time)
		if o.Done != nil {
			end = max(end, o.Done.Time)
		}
	}
	for _, w := range v.windows {
		end = max(end, w.End)
	}
	slices.Sort(procs)
	for i, p := range procs {
		rows[history.Process(p)] = i
	}
	d.Procs = append(d.Procs, procs...)
	d.End = millis(end)
	for _, o := range v.ops {
		if o.FromList != nil {
			continue // its list is drawn
		}
		done := -1.0
		if o.Done != nil {
			done = millis(o.Done.Time)
		}
		typ := 2
		switch o.Type {
		case history.OK:
			typ = 0
		case history.Fail:
			typ = 1
		}
		d.Ops = append(d.Ops, []any{rows[o.Process], millis(o.Invoke.Time), done, typ,
			index(&d.Fs, o.F), index(&d.Keys, o.Key), opDetail(o)})
	}
	for _, w := range v.windows {
		d.Windows = append(d.Windows, []any{index(&d.Kinds, w.Kind), millis(w.Start), millis(w.End), w.Detail})
	}
	return d
}

// opDetail is an operation's values in words, for the tooltip.
func opDetail(o *Op) string {
	var parts []string
	val := func(prefix string, x history.Value) {
		var s []string
		if x.LeaseMS != nil {
			s = append(s, fmt.Sprintf("lease %d ms", *x.LeaseMS))
		}
		if x.WaitMS != nil && *x.WaitMS > 0 {
			s = append(s, fmt.Sprintf("wait %d ms", *x.WaitMS))
		}
		if x.Held != nil && !*x.Held {
			s = append(s, "free")
		}
		if x.Token != nil {
			s = append(s, fmt.Sprintf("token %d", *x.Token))
		}
		if x.Value != nil {
			s = append(s, fmt.Sprintf("value %d", *x.Value))
		}
		if x.Error != "" {
			s = append(s, x.Error)
		}
		if len(s) > 0 {
			parts = append(parts, prefix+strings.Join(s, ", "))
		}
	}
	val("sent: ", o.Invoke.Value)
	if o.Done != nil {
		val("answer: ", o.Done.Value)
	}
	if o.Resolved != nil {
		parts = append(parts, fmt.Sprintf("audit: granted, token %d", *o.Resolved))
	}
	return strings.Join(parts, "; ")
}

// writeTimeline writes timeline.html: one self-contained page (no script
// or style from elsewhere, so it opens offline and can be archived with the
// run) that draws every operation on a canvas, whatever the history's size,
// where porcupine's visualisation is only written for failing keys.
func (v *Verdict) writeTimeline(w io.Writer, lin []string) error {
	data, err := json.Marshal(v.timeline(lin)) // escapes <, > and &: safe inside <script>
	if err != nil {
		return err
	}
	summary := fmt.Sprintf("%s (ok %d, fail %d, info %d) by %s, %s.",
		count(v.Stats.Ops, "operation"), v.Stats.ByType[history.OK], v.Stats.ByType[history.Fail], v.Stats.ByType[history.Info],
		count(countProcs(v.ops), "client process"), count(len(v.windows), "fault window"))
	r := strings.NewReplacer("{{verdict}}", html.EscapeString(v.Verdict), "{{summary}}", html.EscapeString(summary),
		"{{data}}", string(data))
	_, err = r.WriteString(w, timelinePage)
	return err
}

func countProcs(ops []*Op) int {
	seen := map[history.Process]bool{}
	for _, o := range ops {
		seen[o.Process] = true
	}
	return len(seen)
}

package checker

import (
	"slices"
	"testing"

	"github.com/raftlock/raftlock/checker/history"
)

// latency.png shows every info operation, as its client saw it: those the
// committed log settled (never applied, so the checks drop them) too, and
// one that never completed; the legend's count is theirs.
func TestLatencyPlotShowsEveryInfoOperation(t *testing.T) {
	b := new(builder).
		add(0, "invoke", "acquire", "k", lease(1000)).add(0, "ok", "acquire", "k", tok(1)).
		add(1, "invoke", "acquire", "j", lease(1000)).add(1, "info", "acquire", "j", errv("outcome unknown")).
		add(0, "invoke", "release", "k", tok(1)).add(0, "info", "release", "k", errv("outcome unknown")).
		add(2, "invoke", "get", "k", history.Value{}).add(2, "ok", "get", "k", free()).
		add(3, "invoke", "renew", "k", tok(1))
	// The committed log: neither the acquire of j nor the release happened.
	v := Check(b.events, Options{Resolutions: []Resolution{{Index: 2, Happened: false}, {Index: 4, F: "release", Happened: false}}})
	if v.Stats.Resolved != 2 {
		t.Fatalf("%d info operations resolved, want 2", v.Stats.Resolved)
	}
	count := map[string]int{}
	for k, pts := range v.latencyPoints() {
		count[k.typ] += len(pts)
		if k.typ == history.Info {
			for _, p := range pts {
				if p.Y <= 0 {
					t.Errorf("info %s at %v: latency %v", k.f, p.X, p.Y)
				}
			}
		}
	}
	if count[history.Info] != 3 || count[history.OK] != 2 {
		t.Errorf("plotted %v; want 3 info (acquire, release, the renew never answered) and 2 ok", count)
	}
}

// The time axis of latency.png is labelled at a round step, often enough
// to read a time off it (gonum's default labelled three ticks of a 30 s
// run).
func TestSecondsTicksLabelsEnough(t *testing.T) {
	for _, tc := range []struct {
		min, max float64
		want     []string
	}{
		{0, 30, []string{"0", "2", "4", "6", "8", "10", "12", "14", "16", "18", "20", "22", "24", "26", "28", "30"}},
		{0, 7.3, []string{"0", "0.5", "1", "1.5", "2", "2.5", "3", "3.5", "4", "4.5", "5", "5.5", "6", "6.5", "7"}},
		{0, 120, []string{"0", "10", "20", "30", "40", "50", "60", "70", "80", "90", "100", "110", "120"}},
	} {
		var got []string
		for _, tk := range (secondsTicks{}).Ticks(tc.min, tc.max) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("[%v, %v]: labels %q, want %q", tc.min, tc.max, got, tc.want)
		}
	}
	for _, span := range []float64{0.9, 3, 45, 60, 300, 3600} {
		n := 0
		for _, tk := range (secondsTicks{}).Ticks(0, span) {
			if tk.Label != "" {
				n++
			}
		}
		if n < 8 || n > 17 {
			t.Errorf("[0, %v]: %d labels, want 8 to 17", span, n)
		}
	}
}

package logticks

import (
	"slices"
	"testing"
	"time"
)

func TestDurationsLabelsReadably(t *testing.T) {
	for _, tc := range []struct {
		min, max float64
		unit     time.Duration
		want     []string
	}{
		// A CDF in µs from 300µs to 80ms: 1-2-5 in each decade, in units.
		{300, 80000, time.Microsecond, []string{"500µs", "1ms", "2ms", "5ms", "10ms", "20ms", "50ms"}},
		// A latency axis in ms over six decades: only the decades.
		{0.01, 20000, time.Millisecond, []string{"10µs", "100µs", "1ms", "10ms", "100ms", "1s", "10s"}},
		// Inside one decade with no 1-2-5 in it: its ends.
		{6, 9, time.Millisecond, []string{"6ms", "9ms"}},
	} {
		var got []string
		for _, tk := range (Durations{Unit: tc.unit}).Ticks(tc.min, tc.max) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
			if tk.Value < tc.min*(1-1e-9) || tk.Value > tc.max*(1+1e-9) {
				t.Errorf("tick %v outside [%v, %v]", tk.Value, tc.min, tc.max)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("[%v, %v] %v: labels %q, want %q", tc.min, tc.max, tc.unit, got, tc.want)
		}
	}
}

func TestNumbers(t *testing.T) {
	var got []string
	for _, tk := range (Numbers{}).Ticks(1, 256) {
		if tk.Label != "" {
			got = append(got, tk.Label)
		}
	}
	if want := []string{"1", "2", "5", "10", "20", "50", "100", "200"}; !slices.Equal(got, want) {
		t.Errorf("labels %q, want %q", got, want)
	}
	if ts := (Numbers{}).Ticks(0, 10); ts != nil {
		t.Errorf("a non-positive range got ticks %v", ts)
	}
}

// Package logticks labels logarithmic plot axes the way people read them:
// at 1, 2 and 5 of each decade, in the value's own unit ("200µs", "5ms",
// "1s"), where gonum's plot.LogTicks writes "1e+06" at powers of ten only.
package logticks

import (
	"math"
	"strconv"
	"time"

	"gonum.org/v1/plot"
)

// Durations ticks an axis whose values are durations counted in Unit
// (time.Microsecond for an axis in µs, time.Millisecond in ms).
type Durations struct{ Unit time.Duration }

// Ticks implements plot.Ticker.
func (d Durations) Ticks(min, max float64) []plot.Tick {
	return ticks(min, max, func(v float64) string { return formatDuration(v * float64(d.Unit)) })
}

// Numbers ticks a plain logarithmic axis (client counts, rates).
type Numbers struct{}

// Ticks implements plot.Ticker.
func (Numbers) Ticks(min, max float64) []plot.Tick {
	return ticks(min, max, func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) })
}

// ticks places labelled ticks at 1, 2 and 5 times each power of ten within
// [min, max] (only at 1 when the axis spans more than four decades, so
// labels never crowd) and unlabelled ones at the other multiples.
func ticks(min, max float64, label func(float64) string) []plot.Tick {
	if min <= 0 || max <= 0 || min > max {
		return nil
	}
	labelled := map[int]bool{1: true, 2: true, 5: true}
	if math.Log10(max/min) > 4 {
		labelled = map[int]bool{1: true}
	}
	var out []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		p := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * p
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if labelled[m] {
				t.Label = label(v)
			}
			out = append(out, t)
		}
	}
	if !hasLabel(out) {
		// A narrow axis inside one decade: label its ends instead.
		out = append(out, plot.Tick{Value: min, Label: label(min)}, plot.Tick{Value: max, Label: label(max)})
	}
	return out
}

func hasLabel(ts []plot.Tick) bool {
	for _, t := range ts {
		if t.Label != "" {
			return true
		}
	}
	return false
}

// formatDuration writes ns nanoseconds with the largest unit that keeps
// the number at least 1, and at most three significant digits.
func formatDuration(ns float64) string {
	units := []struct {
		name string
		size float64
	}{{"s", 1e9}, {"ms", 1e6}, {"µs", 1e3}, {"ns", 1}}
	for _, u := range units {
		if ns >= u.size || u.size == 1 {
			return strconv.FormatFloat(roundSig(ns/u.size, 3), 'f', -1, 64) + u.name
		}
	}
	return ""
}

func roundSig(v float64, digits int) float64 {
	if v == 0 {
		return 0
	}
	scale := math.Pow(10, float64(digits)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*scale) / scale
}

package checker

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/internal/logticks"
)

// visualiseAllBelow: histories with fewer operations get a visualisation of
// every key, not only the failing ones.
const visualiseAllBelow = 2000

// maxFileSafe bounds fileSafe's result: a file name is at most 255 bytes,
// and a 256-byte key escaped is up to three times that.
const maxFileSafe = 120

// fileSafe turns a key into a file name part: escaped, and cut to
// maxFileSafe bytes with a hash of the whole key when it is longer, so two
// long keys that share a beginning still get two files.
func fileSafe(key string) string {
	var b strings.Builder
	for _, r := range key {
		if r < 128 && (r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, "%%%02x", r)
		}
	}
	name := b.String()
	if len(name) <= maxFileSafe {
		return name
	}
	sum := sha256.Sum256([]byte(key))
	return name[:maxFileSafe-17] + "~" + hex.EncodeToString(sum[:8])
}

// count is "1 grant", "2 grants": n and noun, plural unless n is 1.
func count(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "s"):
		return strconv.Itoa(n) + " " + noun + "es"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// Summary writes a short human account of the verdict.
func (v *Verdict) Summary(w io.Writer) {
	word := strings.ToUpper(v.Verdict)
	fmt.Fprintf(w, "# raftlock check: %s\n\n", word)
	fmt.Fprintf(w, "%s, %s (ok %d, fail %d, info %d), %s, %s, %s settled by the committed log; checked in %.2fs.\n\n",
		count(v.Stats.Events, "event"), count(v.Stats.Ops, "operation"), v.Stats.ByType[history.OK], v.Stats.ByType[history.Fail], v.Stats.ByType[history.Info],
		count(v.Stats.Grants, "grant"), count(v.Stats.Nemesis, "nemesis window"), count(v.Stats.Resolved, "info operation"), v.Stats.CheckTime)
	if v.Partial {
		fmt.Fprintf(w, "**Partial**: the run was interrupted; the checks ran on what it recorded.\n\n")
	}
	for _, n := range v.Notes {
		fmt.Fprintf(w, "Note: %s.\n\n", n)
	}
	if v.Stats.Restarts+v.Stats.Snapshots+v.Stats.SnapshotsInstalled > 0 {
		fmt.Fprintf(w, "Cluster: %s, %s taken, %s installed from the leader.\n\n",
			count(v.Stats.Restarts, "member restart"), count(v.Stats.Snapshots, "snapshot"), count(v.Stats.SnapshotsInstalled, "snapshot"))
	}
	if v.Stats.HeldLocks > 0 {
		fmt.Fprintf(w, "Held: %s of %d-byte keys taken before the workload, in %.1fs.\n\n",
			count(v.Stats.HeldLocks, "lock"), v.Stats.HeldKeySize, v.Stats.HeldFillSeconds)
	}
	if v.Stats.MembersReplaced+v.Stats.SnapshotsRefused > 0 {
		fmt.Fprintf(w, "Membership: %s replaced, %d of them caught up by snapshot; %s refused for lacking the member.\n\n",
			count(v.Stats.MembersReplaced, "member"), v.Stats.ReplacedBySnapshot, count(v.Stats.SnapshotsRefused, "snapshot"))
	}
	if v.Stats.PowerCuts > 0 {
		fmt.Fprintf(w, "Power: %s of a member's disk, which dropped %d unsynced bytes (the history's power-cut events say what each dropped).\n\n",
			count(v.Stats.PowerCuts, "cut"), v.Stats.PowerBytesDropped)
	}
	if v.Stats.Corruptions > 0 {
		fmt.Fprintf(w, "Corrupt: %s of a stopped member's data file; the member then refused its data %s, recovered %s, started noticing nothing %s, crashed %s (the history's corrupt and corrupt-end events say which file and how).\n\n",
			count(v.Stats.Corruptions, "damage"), count(v.Stats.CorruptRefused, "time"), count(v.Stats.CorruptRecovered, "time"),
			count(v.Stats.CorruptStarted, "time"), count(v.Stats.CorruptCrashed, "time"))
	}
	fmt.Fprintln(w, "| check | status | decides | violations | note |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range v.Checks {
		fmt.Fprintf(w, "| %s | %s | %v | %d | %s |\n", r.Name, r.Status, r.Decides, len(r.Violations), r.Note)
	}
	for _, r := range v.Checks {
		for i, vi := range r.Violations {
			if i == 0 {
				fmt.Fprintf(w, "\n## %s\n\n", r.Name)
			}
			if i == 10 {
				fmt.Fprintf(w, "- ... and %d more (verdict.json has them all)\n", len(r.Violations)-10)
				break
			}
			fmt.Fprintf(w, "- %s", vi.Message)
			if len(vi.Events) > 0 {
				idx := make([]string, len(vi.Events))
				for j, e := range vi.Events {
					idx[j] = fmt.Sprint(e.Index)
				}
				fmt.Fprintf(w, " (events %s)", strings.Join(idx, ", "))
			}
			fmt.Fprintln(w)
		}
	}
}

// WriteReports writes verdict.json, summary.md, timeline.html, porcupine
// visualisations and latency.png into dir, and returns the names of the
// files it wrote.
func (v *Verdict) WriteReports(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return written, err
	}
	if err := os.WriteFile(filepath.Join(dir, "verdict.json"), append(b, '\n'), 0o644); err != nil {
		return written, err
	}
	written = append(written, "verdict.json")
	if err := writeFile(filepath.Join(dir, "summary.md"), func(w io.Writer) error { v.Summary(w); return nil }); err != nil {
		return written, err
	}
	written = append(written, "summary.md")
	failed := map[string]bool{}
	for _, r := range v.Checks {
		for _, k := range r.FailedKeys {
			failed[k] = true
		}
	}
	model := lockModel()
	annotations := v.nemesisAnnotations()
	keys := slices.Sorted(maps.Keys(v.lin))
	var lin []string
	for _, key := range keys {
		if !failed[key] && v.Stats.Ops >= visualiseAllBelow {
			continue
		}
		info := v.lin[key]
		info.AddAnnotations(annotations)
		name := "lin-" + fileSafe(key) + ".html"
		if err := porcupine.VisualizePath(model, info, filepath.Join(dir, name)); err != nil {
			return written, fmt.Errorf("visualise key %q: %w", key, err)
		}
		lin = append(lin, name)
	}
	written = append(written, lin...)
	if err := writeFile(filepath.Join(dir, "timeline.html"), func(w io.Writer) error { return v.writeTimeline(w, lin) }); err != nil {
		return written, fmt.Errorf("timeline: %w", err)
	}
	written = append(written, "timeline.html")
	if err := v.plotLatency(filepath.Join(dir, "latency.png")); err != nil {
		return written, fmt.Errorf("latency plot: %w", err)
	}
	return append(written, "latency.png"), nil
}

// writeFile creates path and fills it with write, buffered.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (v *Verdict) nemesisAnnotations() []porcupine.Annotation {
	var as []porcupine.Annotation
	for _, w := range v.windows {
		as = append(as, porcupine.Annotation{Tag: "nemesis", Start: w.Start, End: w.End,
			Description: w.Kind, Details: w.Detail, BackgroundColor: "#f6d5d5"})
	}
	return as
}

// outcomeColor tells ok, fail and info apart in latency.png, as in
// timeline.html.
func outcomeColor(typ string) color.Color {
	switch typ {
	case history.OK:
		return color.RGBA{44, 160, 44, 255}
	case history.Fail:
		return color.RGBA{255, 127, 14, 255}
	}
	return color.RGBA{214, 39, 40, 255}
}

// opGlyph gives each lock operation its own marker shape.
func opGlyph(f string) draw.GlyphDrawer {
	switch f {
	case history.OpRelease:
		return draw.TriangleGlyph{}
	case history.OpRenew:
		return draw.SquareGlyph{}
	case history.OpGet:
		return draw.CrossGlyph{}
	}
	return draw.CircleGlyph{}
}

// latencySeries names one series of latency.png: an operation and its
// outcome. Its points are operations at their start (s since the run's
// start) and latency (ms; for an info operation, until its client gave up).
type latencySeries struct{ f, typ string }

// latencyPoints sorts the lock operations into latency.png's series, by
// operation and outcome. Info operations are all there, the client's view,
// even those the committed log showed never happened (which the checks
// leave out): each is a request whose outcome its client never learnt. One
// that never completed (the run ended first) is drawn at the last event.
func (v *Verdict) latencyPoints() map[latencySeries]plotter.XYs {
	ops := v.paired
	if ops == nil {
		ops = v.ops // a Verdict made without Check's pairing (tests)
	}
	var end int64
	for _, o := range ops {
		end = max(end, o.Invoke.Time)
		if o.Done != nil {
			end = max(end, o.Done.Time)
		}
	}
	points := map[latencySeries]plotter.XYs{}
	for _, o := range ops {
		if !isLockOp(o) || o.FromList != nil || (o.Done == nil && o.Type != history.Info) {
			continue
		}
		done := end
		if o.Done != nil {
			done = o.Done.Time
		}
		y := max(float64(done-o.Invoke.Time)/1e6, 0.001)
		k := latencySeries{o.F, o.Type}
		points[k] = append(points[k], plotter.XY{X: float64(o.Invoke.Time) / 1e9, Y: y})
	}
	return points
}

// plotLatency draws each lock operation's latency against its start on a
// log axis (a 2 ms grant and a 5 s timeout on one picture), colour for the
// outcome and shape for the operation, with the nemesis windows shaded and
// the legend beside the plot, where it hides no point. Info operations,
// few and the ones that matter, are drawn larger and last, over the
// others, and the legend counts each outcome.
func (v *Verdict) plotLatency(path string) error {
	p := plot.New()
	p.Title.Text = "lock operation latency over time, fault windows shaded"
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "latency (log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logticks.Durations{Unit: time.Millisecond}
	p.X.Tick.Marker = secondsTicks{}
	points := v.latencyPoints()
	minY, maxY, maxX := math.Inf(1), 0.0, 0.0
	count := map[string]int{}
	for k, pts := range points {
		count[k.typ] += len(pts)
		for _, pt := range pts {
			minY, maxY, maxX = min(minY, pt.Y), max(maxY, pt.Y), max(maxX, pt.X)
		}
	}
	if maxY == 0 {
		minY, maxY = 0.1, 1 // nothing answered: an empty axis, still logarithmic
	}
	p.Add(&shading{windows: v.windows, minY: minY, maxY: maxY})
	for _, w := range v.windows {
		maxX = max(maxX, float64(w.End)/1e9)
	}
	if err := addLatencyPoints(p, points); err != nil {
		return err
	}
	// Some room around the points; and a log axis cannot span one value,
	// which gonum would widen to a non-positive minimum.
	p.Y.Min, p.Y.Max = minY/1.5, maxY*1.5
	// Time from the run's start, to its last operation or heal.
	p.X.Min, p.X.Max = 0, max(maxX, 1)
	return writePlot(path, p, v.latencyLegend(count))
}

// latencyLegend is latency.png's legend: the outcomes with their counts,
// the operations' shapes, and the fault windows the run had.
func (v *Verdict) latencyLegend(count map[string]int) plot.Legend {
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.Padding = vg.Points(2)
	swatch := func(c color.Color) *plotter.Polygon {
		s, _ := plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}})
		s.Color, s.LineStyle.Width = c, 0
		return s
	}
	for _, typ := range []string{history.OK, history.Fail} {
		legend.Add(fmt.Sprintf("%s: %d", typ, count[typ]), swatch(outcomeColor(typ)))
	}
	ring, _ := plotter.NewScatter(plotter.XYs{{}})
	ring.GlyphStyle = draw.GlyphStyle{Shape: draw.RingGlyph{}, Radius: vg.Points(5), Color: color.Black}
	dot, _ := plotter.NewScatter(plotter.XYs{{}})
	dot.GlyphStyle = draw.GlyphStyle{Shape: opGlyph(history.OpAcquire), Radius: vg.Points(3), Color: outcomeColor(history.Info)}
	legend.Add(fmt.Sprintf("info: %d (outcome unknown)", count[history.Info]), ring, dot)
	for _, f := range latencyOps {
		s, _ := plotter.NewScatter(plotter.XYs{{}})
		s.GlyphStyle = draw.GlyphStyle{Shape: opGlyph(f), Radius: vg.Points(2.5), Color: color.Gray{80}}
		legend.Add(f, s)
	}
	kinds := map[string]bool{}
	for _, w := range v.windows {
		kinds[w.Kind] = true
	}
	for _, k := range shadedFaults {
		if kinds[k] {
			legend.Add("fault: "+k, swatch(faultColor(k)))
		}
	}
	return legend
}

// latencyOps are the operations latency.png draws, in its legend's order.
var latencyOps = []string{history.OpAcquire, history.OpRelease, history.OpRenew, history.OpGet}

// shadedFaults are the fault windows with a colour of their own, in the
// legend's order.
var shadedFaults = []string{history.FaultKill, history.FaultPause, history.FaultPartition, history.FaultDelay, history.FaultLoss, history.FaultClock}

// addLatencyPoints adds each series' points: ok, then fail, then info
// over them, larger and ringed.
func addLatencyPoints(p *plot.Plot, points map[latencySeries]plotter.XYs) error {
	for _, typ := range []string{history.OK, history.Fail, history.Info} {
		for _, f := range latencyOps {
			pts := points[latencySeries{f, typ}]
			if len(pts) == 0 {
				continue
			}
			s, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			s.GlyphStyle = draw.GlyphStyle{Shape: opGlyph(f), Radius: vg.Points(1.4), Color: outcomeColor(typ)}
			if typ == history.Info {
				ring, err := plotter.NewScatter(pts)
				if err != nil {
					return err
				}
				ring.GlyphStyle = draw.GlyphStyle{Shape: draw.RingGlyph{}, Radius: vg.Points(4.5), Color: color.Black}
				s.GlyphStyle.Radius = vg.Points(2.8)
				p.Add(ring)
			}
			p.Add(s)
		}
	}
	return nil
}

// writePlot writes p as a PNG with legend beside it, where it hides no
// point.
func writePlot(path string, p *plot.Plot, legend plot.Legend) error {
	const width, height, margin = 11 * vg.Inch, 4.5 * vg.Inch, 8 * vg.Inch / 72
	img := vgimg.New(width, height)
	dc := draw.New(img)
	lr := legend.Rectangle(dc)
	legendWidth := lr.Max.X - lr.Min.X + 2*margin
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.Draw(draw.Crop(dc, width-legendWidth+margin, 0, 0, -vg.Points(24)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// secondsTicks labels a time axis in seconds at a round step (1, 2 or 5
// times a power of ten) that gives 8 to 16 labels, with an unlabelled tick
// halfway between two; gonum's default labels about three.
type secondsTicks struct{}

func (secondsTicks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	span := max - min
	step := math.Pow(10, math.Floor(math.Log10(span/16)))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(m*step) <= 16 {
			step *= m
			break
		}
	}
	half := step / 2
	var ts []plot.Tick
	for i := math.Ceil(min / half); i*half <= max*(1+1e-9); i++ {
		t := plot.Tick{Value: i * half}
		if math.Mod(i, 2) == 0 {
			t.Label = strconv.FormatFloat(roundTo(i*half, step), 'f', -1, 64)
		}
		ts = append(ts, t)
	}
	return ts
}

// roundTo rounds v to the digits step has, so that 0.30000000000000004
// is labelled 0.3.
func roundTo(v, step float64) float64 {
	scale := math.Pow(10, max(0, -math.Floor(math.Log10(step))))
	return math.Round(v*scale) / scale
}

// shading is a plotter that fills the nemesis windows.
type shading struct {
	windows    []Window
	minY, maxY float64 // the data's latency range, so a log axis has one
}

// faultColors shade each nemesis family in its own translucent colour;
// faultColor gives any other a grey.
var faultColors = map[string]color.Color{
	history.FaultKill:      color.NRGBA{214, 39, 40, 50},
	history.FaultPause:     color.NRGBA{255, 127, 14, 60},
	history.FaultPartition: color.NRGBA{148, 103, 189, 60},
	history.FaultDelay:     color.NRGBA{140, 86, 75, 55},
	history.FaultLoss:      color.NRGBA{227, 119, 194, 55},
	history.FaultClock:     color.NRGBA{31, 119, 180, 45},
}

func faultColor(kind string) color.Color {
	if c, ok := faultColors[kind]; ok {
		return c
	}
	return color.NRGBA{127, 127, 127, 45}
}

func (s *shading) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	// Windows span the whole height of the plot, whatever its y scale.
	y0, y1 := c.Min.Y, c.Max.Y
	for _, w := range s.windows {
		x0, x1 := trX(float64(w.Start)/1e9), trX(float64(w.End)/1e9)
		c.FillPolygon(faultColor(w.Kind), []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
	}
}

func (s *shading) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = 0, 0
	for i, w := range s.windows {
		if i == 0 || float64(w.Start)/1e9 < xmin {
			xmin = float64(w.Start) / 1e9
		}
		xmax = max(xmax, float64(w.End)/1e9)
	}
	return xmin, xmax, s.minY, s.maxY
}

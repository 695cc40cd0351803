package bench

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"image/color"
	"os"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/raftlock/raftlock/internal/logticks"
)

// The colours of the plots (matplotlib's tab10).
var (
	blue   = color.RGBA{31, 119, 180, 255}
	orange = color.RGBA{255, 127, 14, 255}
	green  = color.RGBA{44, 160, 44, 255}
	red    = color.RGBA{214, 39, 40, 255}
	purple = color.RGBA{148, 103, 189, 255}
	brown  = color.RGBA{140, 86, 75, 255}
	pink   = color.RGBA{227, 119, 194, 255}
	grey   = color.RGBA{127, 127, 127, 255}
	olive  = color.RGBA{188, 189, 34, 255}
	cyan   = color.RGBA{23, 190, 207, 255}
)

// palette colours series that have an order of their own (held sizes,
// ascending; the workloads and client counts of scale.png).
var palette = []color.Color{blue, orange, green, red, purple, brown, pink, grey}

// systemColor is a system's colour in every plot, whatever systems a
// report has and in whatever order they ran: the systems the bench knows
// by name, and any other (a raftlock ablation, "raftlock --no-batch") one
// drawn from its name.
func systemColor(system string) color.Color {
	switch system {
	case "raftlock":
		return blue
	case "etcd-mutex":
		return orange
	case "etcd-txn":
		return green
	case "redis":
		return red
	}
	others := []color.Color{purple, brown, pink, grey, olive, cyan}
	h := fnv.New32a()
	h.Write([]byte(system))
	return others[h.Sum32()%uint32(len(others))]
}

// seriesColor is the colour of x's curves. A report of bench --held has
// one system at several table sizes: there the colour tells the sizes
// apart, each its own in every plot of the report.
func (r *Report) seriesColor(x Run) color.Color {
	if len(r.Scale) == 0 {
		return systemColor(x.System)
	}
	var sizes []int
	for _, y := range r.Runs {
		sizes = append(sizes, y.Held)
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	i, _ := slices.BinarySearch(sizes, x.Held)
	return palette[i%len(palette)]
}

// heldLabel names a run's table size in plot legends, for reports of
// bench --held.
func (r *Report) heldLabel(x Run) string {
	if len(r.Scale) == 0 {
		return ""
	}
	return fmt.Sprintf(" held=%d", x.Held)
}

// tputPanel is one workload's panel of throughput.png: a line per system
// (per table size with --held) of throughput against clients. Workloads
// differ by orders of magnitude (a contended handoff against an
// uncontended cycle), so each gets its own axis.
type tputPanel struct {
	workload string
	lines    []tputLine
}

type tputLine struct {
	name  string // the legend's: the system, with its table size
	color color.Color
	pts   plotter.XYs // ascending clients
}

// throughputPanels sorts the closed-loop runs into one panel per workload,
// in the order the workloads ran.
func (r *Report) throughputPanels() []tputPanel {
	var panels []tputPanel
	for _, x := range r.Runs {
		if x.Rate > 0 {
			continue // open loop: the rate was chosen, not measured
		}
		pi := slices.IndexFunc(panels, func(p tputPanel) bool { return p.workload == x.Workload })
		if pi < 0 {
			panels = append(panels, tputPanel{workload: x.Workload})
			pi = len(panels) - 1
		}
		p := &panels[pi]
		name := x.System + r.heldLabel(x)
		li := slices.IndexFunc(p.lines, func(l tputLine) bool { return l.name == name })
		if li < 0 {
			p.lines = append(p.lines, tputLine{name: name, color: r.seriesColor(x)})
			li = len(p.lines) - 1
		}
		p.lines[li].pts = append(p.lines[li].pts, plotter.XY{X: float64(x.Clients), Y: x.ThroughputOpsS})
	}
	for _, p := range panels {
		for _, l := range p.lines {
			slices.SortFunc(l.pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		}
	}
	return panels
}

// plotThroughput draws throughput against clients, one panel per
// workload side by side, with one legend beside them.
func (r *Report) plotThroughput(path string) error {
	panels := r.throughputPanels()
	if len(panels) == 0 {
		return nil // open-loop runs only: no closed-loop curve to draw
	}
	legend := newLegend()
	named := map[string]bool{}
	var plots []*plot.Plot
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = "throughput, " + pn.workload
		p.X.Label.Text = "clients"
		p.Y.Label.Text = "ops / s"
		p.Y.Tick.Marker = plainTicks{}
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logticks.Numbers{}
		for _, ln := range pn.lines {
			l, s, err := plotter.NewLinePoints(ln.pts)
			if err != nil {
				return fmt.Errorf("plot %s %s: %w", pn.workload, ln.name, err)
			}
			l.Color, s.Color = ln.color, ln.color
			l.Width = vg.Points(1.5)
			p.Add(l, s)
			if !named[ln.name] {
				named[ln.name] = true
				legend.Add(ln.name, l, s)
			}
		}
		// From zero, so that a panel's lines are not stretched apart.
		p.Y.Min = 0
		if p.X.Min == p.X.Max {
			// One client count: gonum's log axis cannot span a single value.
			p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
		}
		plots = append(plots, p)
	}
	return saveBeside(path, vg.Length(len(plots))*4.5*vg.Inch, 4.5*vg.Inch, legend, func(dc draw.Canvas) {
		tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: 6 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter}
		canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
		for i, p := range plots {
			p.Draw(canvases[0][i])
		}
	})
}

// plotCDF draws the latency distribution of each run of one workload:
// colour by system, dashes by client count, the legend beside the plot,
// where it hides no curve.
func (r *Report) plotCDF(path, workload string) error {
	p := plot.New()
	p.Title.Text = "op latency CDF, " + workload
	p.X.Label.Text = "latency (log)"
	p.Y.Label.Text = "fraction of ops"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logticks.Durations{Unit: time.Microsecond}
	p.Y.Tick.Marker = fractionTicks{}
	clients := map[int]int{}
	for _, x := range r.Runs {
		if _, ok := clients[x.Clients]; !ok {
			clients[x.Clients] = len(clients)
		}
	}
	dashes := [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}}
	legend := newLegend()
	for _, x := range r.Runs {
		if x.hist == nil || x.Workload != workload {
			continue
		}
		var pts plotter.XYs
		for _, c := range x.hist.CDF() {
			pts = append(pts, plotter.XY{X: max(c[0], 1), Y: c[1]})
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = r.seriesColor(x)
		l.Dashes = dashes[clients[x.Clients]%len(dashes)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		legend.Add(fmt.Sprintf("%s%s c=%d", x.System, r.heldLabel(x), x.Clients), l)
	}
	p.Y.Min, p.Y.Max = 0, 1
	switch {
	case p.X.Min > p.X.Max:
		// No latencies recorded (a run read back from JSON): an empty
		// axis, still logarithmic.
		p.X.Min, p.X.Max = 1, 1000
	case p.X.Min == p.X.Max:
		p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
	}
	return saveBeside(path, 9*vg.Inch, 5*vg.Inch, legend, func(dc draw.Canvas) { p.Draw(dc) })
}

// plainTicks are gonum's default ticks, labelled as plain numbers: "750",
// where gonum writes "750.00" on some axes and not on others.
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

// fractionTicks labels a 0..1 axis every 0.2, with a tick every 0.1.
type fractionTicks struct{}

func (fractionTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for i := 0; i <= 10; i++ {
		v := float64(i) / 10
		if v < min || v > max {
			continue
		}
		t := plot.Tick{Value: v}
		if i%2 == 0 {
			t.Label = fmt.Sprintf("%.1f", v)
		}
		ts = append(ts, t)
	}
	return ts
}

func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.Padding = vg.Points(2)
	return l
}

// saveBeside writes a PNG of width and height: what drawPlots draws on the
// left, and legend in a column of its own on the right, outside every
// plot's area, so it can hide nothing.
func saveBeside(path string, width, height vg.Length, legend plot.Legend, drawPlots func(draw.Canvas)) error {
	// The legend's width, and a margin either side of it.
	margin := 4 * vg.Millimeter
	img := vgimg.New(width, height)
	dc := draw.New(img)
	lr := legend.Rectangle(dc)
	lw := lr.Max.X - lr.Min.X + 2*margin
	img = vgimg.New(width+lw, height)
	dc = draw.New(img)
	drawPlots(draw.Crop(dc, 0, -lw, 0, 0))
	// Level with the top of the plot area, below the title.
	legend.Draw(draw.Crop(dc, width+margin, -margin, 0, -8*vg.Millimeter))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/raftlock/raftlock/internal/periodic"
	"github.com/raftlock/raftlock/node"
)

// Ring sizes: the events a console keeps, and its charts' points (one a
// second).
const (
	maxEvents   = 100
	maxExpiries = 100
	maxPoints   = 120
	// The console shows the newest 30 events of the cluster and, apart,
	// the newest 20 expiries, so a burst of expiries never hides a leader
	// change.
	shownEvents   = 30
	shownExpiries = 20
)

// idle is how long after the last look at the console its watch of lock
// expiries stays on: nobody looking, the member makes no lock events.
const idle = 30 * time.Second

// Event is one line of the cluster's recent events.
type Event struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"` // leader, membership or snapshot
	Text string    `json:"text"`
}

// Expiry is a lock whose lease ran out and whose Expire applied.
type Expiry struct {
	Time  time.Time `json:"time"`
	Key   string    `json:"key"`
	Token uint64    `json:"token"`
	Owner string    `json:"owner"`
}

// Point is one second of the charts: rates over the second before Time,
// latency quantiles of the requests and synced writes in it (null: none).
type Point struct {
	Time       int64    `json:"t"`        // Unix milliseconds
	Requests   float64  `json:"requests"` // client requests answered per second
	Commits    float64  `json:"commits"`  // lock commands applied per second
	P50MS      *float64 `json:"p50_ms"`
	P99MS      *float64 `json:"p99_ms"`
	FsyncP99MS *float64 `json:"fsync_p99_ms"`
}

// recorder samples a member once a second: its status (leader and
// configuration changes), its metrics (the charts, snapshots), and while
// someone looks, its lock expiries.
type recorder struct {
	node     *node.Node
	lastView atomic.Int64 // Unix nanoseconds

	mu       sync.Mutex
	events   []Event
	expiries []Expiry
	points   []Point
	waiters  int64
	prev     *sample
}

// sample is what one second's recording compares with the last.
type sample struct {
	at                  time.Time
	st                  node.Status
	requests, commits   float64
	snapshots, installs float64
	latency, fsync      histogram
}

func newRecorder(n *node.Node) *recorder { return &recorder{node: n} }

func (r *recorder) viewed() { r.lastView.Store(time.Now().UnixNano()) }

func (r *recorder) looked() bool {
	return time.Since(time.Unix(0, r.lastView.Load())) < idle
}

func (r *recorder) run(ctx context.Context) {
	r.record(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	var watching atomic.Bool
	periodic.Run(ctx, time.Second, func() {
		r.record(ctx)
		if r.looked() && watching.CompareAndSwap(false, true) {
			wg.Go(func() {
				defer watching.Store(false)
				r.watchExpiries(ctx)
			})
		}
	})
}

// watchExpiries records lock expiries while someone looks at the console,
// watching again after a watch falls behind or meets a snapshot.
func (r *recorder) watchExpiries(ctx context.Context) {
	for ctx.Err() == nil && r.looked() {
		wctx, cancel := context.WithCancel(ctx)
		w, err := r.node.Watch(wctx, "", node.Revision{})
		if err != nil {
			cancel()
			return
		}
		r.drain(wctx, w)
		cancel()
		if errors.Is(w.Err(), node.ErrStopped) {
			return
		}
	}
}

// drain reads w until it ends or nobody has looked for idle.
func (r *recorder) drain(ctx context.Context, w *node.Watch) {
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		select {
		case ev, ok := <-w.C:
			if !ok {
				return
			}
			if ev.Type == node.EventExpired {
				r.mu.Lock()
				r.expiries = push(r.expiries, maxExpiries, Expiry{Time: time.Now(), Key: ev.Key, Token: ev.Token, Owner: ev.Owner})
				r.mu.Unlock()
			}
		case <-check.C:
			if !r.looked() {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// record takes one sample and turns what changed since the last into
// events and a chart point.
func (r *recorder) record(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	st, err := r.node.Status(ctx)
	if err != nil {
		return
	}
	s := &sample{at: time.Now(), st: st}
	fams, err := r.node.Metrics().Registry.Gather()
	if err != nil {
		return
	}
	waiters := s.read(fams)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiters = waiters
	r.changes(r.prev, s)
	if p := r.prev; p != nil {
		r.points = push(r.points, maxPoints, point(p, s))
	}
	r.prev = s
}

// read fills s from the member's metrics and returns its waiters gauge.
func (s *sample) read(fams []*dto.MetricFamily) (waiters int64) {
	for _, f := range fams {
		ms := f.GetMetric()
		switch f.GetName() {
		case "raftlock_client_requests_total":
			for _, m := range ms {
				s.requests += m.GetCounter().GetValue()
			}
		case "raftlock_commands_applied_total":
			s.commits = ms[0].GetCounter().GetValue()
		case "raftlock_snapshots_total":
			s.snapshots = ms[0].GetCounter().GetValue()
		case "raftlock_snapshots_installed_total":
			s.installs = ms[0].GetCounter().GetValue()
		case "raftlock_waiters":
			waiters = int64(ms[0].GetGauge().GetValue())
		case "raftlock_fsync_seconds":
			s.fsync = s.fsync.add(ms[0].GetHistogram())
		case "raftlock_request_duration_seconds":
			for _, m := range ms {
				if op := label(m, "op"); op != "status" && op != "admin" {
					s.latency = s.latency.add(m.GetHistogram())
				}
			}
		}
	}
	return waiters
}

// changes records as events what changed between p (nil: none yet) and s.
func (r *recorder) changes(p, s *sample) {
	ev := func(kind, format string, args ...any) { // r.mu is held
		r.events = push(r.events, maxEvents, Event{Time: s.at, Kind: kind, Text: fmt.Sprintf(format, args...)})
	}
	st := s.st
	if p == nil || p.st.Leader != st.Leader {
		switch {
		case st.Leader == 0 && p == nil:
			ev("leader", "member %d started recording; no leader known yet", st.ID)
		case st.Leader == 0:
			ev("leader", "no leader known (term %d)", st.Term)
		default:
			ev("leader", "member %d leads (term %d)", st.Leader, st.Term)
		}
	}
	if p == nil {
		ev("membership", "configuration: voters %s; learners %s", ids(st.Voters), ids(st.Learners))
		return
	}
	for _, line := range configChanges(p.st, st) {
		ev("membership", "%s", line)
	}
	if n := s.snapshots - p.snapshots; n > 0 {
		ev("snapshot", "snapshot taken (applied index %d)", st.Applied)
	}
	if n := s.installs - p.installs; n > 0 {
		ev("snapshot", "snapshot installed from the leader (applied index %d)", st.Applied)
	}
}

// configChanges says, member by member, how the configuration changed.
func configChanges(a, b node.Status) []string {
	var out []string
	role := func(st node.Status, id uint64) string {
		switch {
		case slices.Contains(st.Voters, id):
			return "voter"
		case slices.Contains(st.Learners, id):
			return "learner"
		}
		return ""
	}
	all := slices.Concat(a.Voters, a.Learners, b.Voters, b.Learners)
	slices.Sort(all)
	for _, id := range slices.Compact(all) {
		was, is := role(a, id), role(b, id)
		switch {
		case was == is:
		case was == "":
			out = append(out, fmt.Sprintf("member %d added as a %s", id, is))
		case is == "":
			out = append(out, fmt.Sprintf("member %d removed", id))
		default:
			out = append(out, fmt.Sprintf("member %d is now a %s", id, is))
		}
	}
	return out
}

// push appends v to ring, dropping its oldest once it holds size.
func push[T any](ring []T, size int, v T) []T {
	if len(ring) == size {
		ring = append(ring[:0], ring[1:]...)
	}
	return append(ring, v)
}

// view returns the newest events, newest first, the newest expiries of
// the keys the caller may read, the chart's points and the waiters gauge.
func (r *recorder) view(mayRead func(key string) bool) ([]Event, []Expiry, []Point, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := slices.Clone(r.events[max(0, len(r.events)-shownEvents):])
	slices.Reverse(evs)
	exps := []Expiry{}
	for i := len(r.expiries) - 1; i >= 0 && len(exps) < shownExpiries; i-- {
		if e := r.expiries[i]; mayRead(e.Key) {
			exps = append(exps, e)
		}
	}
	return evs, exps, slices.Clone(r.points), r.waiters
}

// point is the chart point of the second between p and s.
func point(p, s *sample) Point {
	secs := s.at.Sub(p.at).Seconds()
	pt := Point{Time: s.at.UnixMilli()}
	if secs > 0 {
		pt.Requests = max(0, s.requests-p.requests) / secs
		pt.Commits = max(0, s.commits-p.commits) / secs
	}
	d := s.latency.minus(p.latency)
	pt.P50MS, pt.P99MS = d.quantileMS(0.5), d.quantileMS(0.99)
	pt.FsyncP99MS = s.fsync.minus(p.fsync).quantileMS(0.99)
	return pt
}

// histogram is a Prometheus histogram's cumulative buckets, summed over
// the series read into it.
type histogram struct {
	bounds []float64 // upper bounds, seconds
	counts []uint64  // cumulative
	total  uint64
}

func (h histogram) add(m *dto.Histogram) histogram {
	bs := m.GetBucket()
	if h.bounds == nil {
		h.bounds, h.counts = make([]float64, len(bs)), make([]uint64, len(bs))
		for i, b := range bs {
			h.bounds[i] = b.GetUpperBound()
		}
	}
	if len(bs) != len(h.bounds) {
		return h // not the same buckets: not summed
	}
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts), total: h.total + m.GetSampleCount()}
	for i, b := range bs {
		out.counts[i] += b.GetCumulativeCount()
	}
	return out
}

// minus is what was observed in h and not yet in o (o earlier).
func (h histogram) minus(o histogram) histogram {
	if len(o.counts) != len(h.counts) {
		return h
	}
	d := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts)), total: h.total - o.total}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - o.counts[i]
	}
	return d
}

// quantileMS estimates quantile q in milliseconds by linear
// interpolation within its bucket, as Prometheus's histogram_quantile
// does; nil when nothing was observed.
func (h histogram) quantileMS(q float64) *float64 {
	if h.total == 0 {
		return nil
	}
	rank := q * float64(h.total)
	lower, below := 0.0, uint64(0)
	for i, c := range h.counts {
		if float64(c) >= rank {
			in := float64(c - below)
			v := h.bounds[i]
			if in > 0 {
				v = lower + (h.bounds[i]-lower)*(rank-float64(below))/in
			}
			ms := math.Round(v*1e6) / 1e3
			return &ms
		}
		lower, below = h.bounds[i], c
	}
	ms := lower * 1e3 // in the +Inf bucket: the highest bound is all we know
	return &ms
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func ids(list []uint64) string {
	if len(list) == 0 {
		return "none"
	}
	s := make([]string, len(list))
	for i, id := range list {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

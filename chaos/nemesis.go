package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

// Nemesis families.
var Families = []string{"kill", "pause", "partition", "clock"}

// Nemesis injects faults on a schedule drawn from its seed.
type Nemesis struct {
	Sup      *Supervisor
	Rec      *history.Recorder
	Families []string
	Interval time.Duration // mean quiet time between faults
	Duration time.Duration // mean fault length
	Seed     uint64
	Log      *slog.Logger

	current atomic.Value // string: the fault in force, for the progress line
}

// Current describes the fault in force, or "".
func (n *Nemesis) Current() string {
	s, _ := n.current.Load().(string)
	return s
}

func (n *Nemesis) setCurrent(format string, args ...any) {
	n.current.Store(fmt.Sprintf(format, args...))
}

// Run injects faults until ctx ends, healing each before the next.
func (n *Nemesis) Run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(n.Seed, 0x6e656d65))
	for {
		sleep(ctx, jitter(rng, n.Interval))
		if ctx.Err() != nil {
			return
		}
		family := n.Families[rng.IntN(len(n.Families))]
		heal := n.inject(ctx, rng, family)
		sleep(ctx, jitter(rng, n.Duration))
		// Heal even when the run is over: the final reads need a whole cluster.
		heal(context.WithoutCancel(ctx))
		n.setCurrent("")
		if ctx.Err() != nil {
			return
		}
	}
}

func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d)+1))
}

func (n *Nemesis) record(f string, v history.Value) {
	n.Rec.Record(history.Nemesis, history.Info, f, "", v)
}

// targets picks members: one, the leader, a minority or a majority.
func (n *Nemesis) targets(ctx context.Context, rng *rand.Rand) []int {
	ids := n.Sup.IDs()
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var out []int
	switch rng.IntN(4) {
	case 0:
		out = ids[:1]
	case 1:
		if l := n.Sup.Leader(ctx); l != 0 {
			out = []int{l}
		} else {
			out = ids[:1]
		}
	case 2:
		out = ids[:max(1, (len(ids)-1)/2)]
	default:
		out = ids[:len(ids)/2+1]
	}
	out = append([]int(nil), out...)
	slices.Sort(out)
	return out
}

// inject starts one fault and returns its heal.
func (n *Nemesis) inject(ctx context.Context, rng *rand.Rand, family string) func(context.Context) {
	switch family {
	case "kill":
		nodes := n.targets(ctx, rng)
		n.record("kill", history.Value{Nodes: nodes})
		n.setCurrent("kill %v", nodes)
		for _, id := range nodes {
			n.Sup.Kill(id)
		}
		return func(context.Context) {
			for _, id := range nodes {
				if err := n.Sup.StartNode(id); err != nil {
					n.Log.Error("restart failed", "node", id, "err", err)
				}
			}
			n.record("start", history.Value{Nodes: nodes})
		}
	case "pause":
		nodes := n.targets(ctx, rng)
		n.record("pause", history.Value{Nodes: nodes})
		n.setCurrent("pause %v", nodes)
		for _, id := range nodes {
			n.Sup.Pause(id)
		}
		return func(context.Context) {
			for _, id := range nodes {
				n.Sup.Resume(id)
			}
			n.record("resume", history.Value{Nodes: nodes})
		}
	case "partition":
		groups, connected := n.partition(ctx, rng)
		n.record("partition", history.Value{Groups: groups})
		n.setCurrent("partition %v", groups)
		n.Sup.SetLinks(connected)
		return func(context.Context) {
			n.Sup.Heal()
			n.record("heal", history.Value{})
		}
	default: // clock
		nodes := n.targets(ctx, rng)
		rates := []float64{0.25, 0.5, 2, 4}
		var parts []string
		for _, id := range nodes {
			rate := rates[rng.IntN(len(rates))]
			if err := n.Sup.SetClock(ctx, id, rate, 0); err != nil {
				n.Log.Warn("clock fault not applied", "node", id, "err", err)
				continue
			}
			n.record("clock", history.Value{Node: history.Ptr(id), Rate: history.Ptr(rate), OffsetMS: history.Ptr[int64](0)})
			parts = append(parts, fmt.Sprintf("%d@%gx", id, rate))
		}
		n.setCurrent("clock %s", strings.Join(parts, " "))
		return func(ctx context.Context) {
			for _, id := range nodes {
				if err := n.Sup.SetClock(ctx, id, 1, 0); err == nil {
					n.record("clock", history.Value{Node: history.Ptr(id), Rate: history.Ptr(1.0), OffsetMS: history.Ptr[int64](0)})
				}
			}
		}
	}
}

// partition draws a shape: isolate one node, isolate the leader, majority
// and minority halves, a majorities ring, or a bridge.
func (n *Nemesis) partition(ctx context.Context, rng *rand.Rand) ([][]int, func(i, j int) bool) {
	ids := n.Sup.IDs()
	shapes := []string{"one", "leader", "halves"}
	if len(ids) >= 5 {
		shapes = append(shapes, "ring", "bridge")
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	split := func(a []int) ([][]int, func(i, j int) bool) {
		side := map[int]bool{}
		for _, id := range a {
			side[id] = true
		}
		var b []int
		for _, id := range n.Sup.IDs() {
			if !side[id] {
				b = append(b, id)
			}
		}
		a = append([]int(nil), a...)
		slices.Sort(a)
		return [][]int{a, b}, func(i, j int) bool { return side[i] == side[j] }
	}
	switch shapes[rng.IntN(len(shapes))] {
	case "one":
		return split(ids[:1])
	case "leader":
		if l := n.Sup.Leader(ctx); l != 0 {
			return split([]int{l})
		}
		return split(ids[:1])
	case "halves":
		return split(ids[:len(ids)/2])
	case "ring":
		// Each node sees its two ring neighbours: every node has a majority
		// (itself and two of five), no two majorities agree.
		pos := map[int]int{}
		for i, id := range ids {
			pos[id] = i
		}
		var groups [][]int
		for i := range ids {
			g := []int{ids[(i+len(ids)-1)%len(ids)], ids[i], ids[(i+1)%len(ids)]}
			slices.Sort(g)
			groups = append(groups, g)
		}
		return groups, func(i, j int) bool {
			d := (pos[i] - pos[j] + len(ids)) % len(ids)
			return d <= 1 || d == len(ids)-1
		}
	default: // bridge: two halves joined by one node that sees both
		bridge := ids[0]
		left := map[int]bool{}
		for _, id := range ids[1 : 1+(len(ids)-1)/2] {
			left[id] = true
		}
		var a, b []int
		for _, id := range n.Sup.IDs() {
			switch {
			case id == bridge:
			case left[id]:
				a = append(a, id)
			default:
				b = append(b, id)
			}
		}
		ga := append(append([]int(nil), a...), bridge)
		gb := append(append([]int(nil), b...), bridge)
		slices.Sort(ga)
		slices.Sort(gb)
		return [][]int{ga, gb}, func(i, j int) bool {
			return i == bridge || j == bridge || left[i] == left[j]
		}
	}
}

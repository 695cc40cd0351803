package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

// Families are the nemesis families, in the order --nemesis documents them.
var Families = []string{"kill", "pause", "partition", "clock", "net", "snapshot", "garbage"}

// OptInFamilies are families a run has only when --nemesis names them:
// garbage-heartbeat sends the forged frame that once stopped every member
// without TLS (a heartbeat with a commit index past the log, see
// garbageKinds; members now refuse it), so a run shows it is refused. garbage itself is a
// default family: eight 30 s runs with it (seeds 11, 21-24, 101-103)
// stayed valid with no member crashed and took 32-36 s, as without it.
//
// membership replaces a member (remove one, add a new one that catches up
// by snapshot); it is opt-in so the default suite's mix of faults stays as
// measured, and CI runs it on its own (.ci/run).
var OptInFamilies = []string{"garbage-heartbeat", "membership"}

// combinable are the families that may run two at once: each touches state
// of its own (clocks, link faults, cut links, processes, signals), so any
// two of them heal independently. snapshot drives a partition and kills of
// its own and runs alone. Two at once are injected in this order and healed
// in the reverse: a member is set its clock before it is paused, and is
// resumed before anything else is asked of it.
var combinable = []string{"clock", "net", "partition", "kill", "pause"}

// Nemesis injects faults on a schedule drawn from its seed.
type Nemesis struct {
	Sup      *Supervisor
	Rec      *history.Recorder
	Families []string
	Interval time.Duration // mean quiet time between faults
	Duration time.Duration // mean fault length
	Seed     uint64
	Log      *slog.Logger
	// BigSnapshots: the table is big (chaos --held), so snapshots stream
	// in many chunks and the snapshot family cuts streams mid-transfer.
	BigSnapshots bool

	current        atomic.Value // string: the fault in force, for the progress line
	snapshotFaults int          // snapshot faults so far; Run's goroutine only
	Counts         NemesisCounts
	Garbage        GarbageCounts

	mu        sync.Mutex
	newcomers []Newcomer // the membership family's added members
}

// NemesisCounts say how often the timing-sensitive faults hit their moment.
type NemesisCounts struct {
	AfterSnapshot   atomic.Int64 // kills that followed a snapshot by one poll (a few ms)
	Compacted       atomic.Int64 // isolations that lasted until the leader compacted past the follower
	DuringInstall   atomic.Int64 // kills of a healed follower before its snapshot install was seen done
	AfterInstall    atomic.Int64 // kills of a healed follower just after its install completed
	Double          atomic.Int64 // times two faults ran at once
	SnapshotTimeout atomic.Int64 // snapshot faults whose moment never came within the bound
	SnapshotCuts    atomic.Int64 // snapshot streams cut mid-transfer, the receiver up
	// The membership family's: members replaced (removed, and a new one
	// added and promoted), replacements whose newcomer installed a
	// snapshot, removed members that stopped by themselves (the rest were
	// killed after a few seconds), and membership faults that failed to
	// remove or add (the cluster refused or did not answer).
	Replaced           atomic.Int64
	ReplacedBySnapshot atomic.Int64
	RemovedStopped     atomic.Int64
	MembershipFailed   atomic.Int64
}

// String summarises the counts for the log.
func (c *NemesisCounts) String() string {
	s := fmt.Sprintf("kills right after a snapshot %d, isolations past compaction %d, kills during an install %d, just after one %d, double faults %d, snapshot faults timed out %d",
		c.AfterSnapshot.Load(), c.Compacted.Load(), c.DuringInstall.Load(), c.AfterInstall.Load(), c.Double.Load(), c.SnapshotTimeout.Load())
	if k := c.SnapshotCuts.Load(); k > 0 {
		s += fmt.Sprintf(", snapshot streams cut mid-transfer %d", k)
	}
	if r := c.Replaced.Load() + c.MembershipFailed.Load(); r > 0 {
		s += fmt.Sprintf(", members replaced %d (by snapshot %d, removed member stopped itself %d), membership faults failed %d",
			c.Replaced.Load(), c.ReplacedBySnapshot.Load(), c.RemovedStopped.Load(), c.MembershipFailed.Load())
	}
	return s
}

// Current describes the fault in force, or "".
func (n *Nemesis) Current() string {
	s, _ := n.current.Load().(string)
	return s
}

func (n *Nemesis) setCurrent(format string, args ...any) {
	n.current.Store(fmt.Sprintf(format, args...))
}

// Run injects faults until ctx ends, healing each before the next. The
// families come in rounds, each a seeded shuffle of all of them, so a run
// of a few rounds' length sees every family (the snapshot family first).
// Now and then (one time in
// four, when two combinable families are enabled) two faults run at once.
func (n *Nemesis) Run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(n.Seed, 0x6e656d65))
	var round []string
	var pair []string
	for _, f := range combinable {
		if slices.Contains(n.Families, f) {
			pair = append(pair, f)
		}
	}
	for {
		sleep(ctx, jitter(rng, n.Interval))
		if ctx.Err() != nil {
			return
		}
		if len(round) == 0 {
			first := round == nil
			round = slices.Clone(n.Families)
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
			if i := slices.Index(round, "snapshot"); first && i > 0 {
				// The snapshot faults need the cluster's first seconds of
				// load and are the ones a short run (CI's 30 s) must not
				// miss: they lead the first round.
				round[0], round[i] = round[i], round[0]
			}
		}
		families := round[:1]
		round = round[1:]
		if len(pair) >= 2 && rng.IntN(4) == 0 && families[0] != "snapshot" {
			i := rng.IntN(len(pair))
			j := (i + 1 + rng.IntN(len(pair)-1)) % len(pair)
			families = []string{pair[min(i, j)], pair[max(i, j)]}
			n.Counts.Double.Add(1)
		}
		var heals []func(context.Context)
		var what []string
		for _, f := range families {
			heal, desc := n.inject(ctx, rng, f)
			heals = append(heals, heal)
			what = append(what, desc)
			n.setCurrent("%s", strings.Join(what, " + "))
		}
		sleep(ctx, jitter(rng, n.Duration))
		// Heal even when the run is over, the last fault first: the final
		// reads need a whole cluster.
		for i := len(heals) - 1; i >= 0; i-- {
			heals[i](context.WithoutCancel(ctx))
		}
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

// inject starts one fault and returns its heal and a description.
func (n *Nemesis) inject(ctx context.Context, rng *rand.Rand, family string) (func(context.Context), string) {
	switch family {
	case "kill":
		nodes := n.targets(ctx, rng)
		n.record("kill", history.Value{Nodes: nodes})
		for _, id := range nodes {
			n.Sup.Kill(ctx, id)
		}
		return n.restart(nodes), fmt.Sprintf("kill %v", nodes)
	case "pause":
		nodes := n.targets(ctx, rng)
		if rng.IntN(5) == 0 {
			nodes = n.Sup.IDs() // the whole cluster: a frozen host or hypervisor
		}
		n.record("pause", history.Value{Nodes: nodes})
		for _, id := range nodes {
			n.Sup.Pause(id)
		}
		return func(context.Context) {
			for _, id := range nodes {
				n.Sup.Resume(id)
			}
			n.record("resume", history.Value{Nodes: nodes})
		}, fmt.Sprintf("pause %v", nodes)
	case "partition":
		if rng.IntN(3) == 0 {
			links := n.oneWay(ctx, rng)
			n.record("partition", history.Value{Links: linkList(links)})
			n.Sup.CutLinks(links)
			return n.healLinks, fmt.Sprintf("one-way %v", links)
		}
		groups, connected := n.partition(ctx, rng)
		n.record("partition", history.Value{Groups: groups})
		n.Sup.SetLinks(connected)
		return n.healLinks, fmt.Sprintf("partition %v", groups)
	case "clock":
		return n.clock(ctx, rng)
	case "net":
		return n.net(ctx, rng)
	case "garbage":
		return n.garbage(ctx, rng, garbageKinds, family)
	case "garbage-heartbeat":
		return n.garbage(ctx, rng, garbageUnsafeKinds, family)
	case "membership":
		return n.membership(ctx, rng)
	default: // snapshot: the kinds take turns, isolation first, since
		// it is the only fault that reliably makes a member install a
		// snapshot, and a short run may have room for one snapshot fault;
		// with big snapshots the stream cut comes first, for the same
		// reason: it is the fault such a run is for.
		kinds := []func(context.Context, *rand.Rand) (func(context.Context), string){n.isolatePastCompaction, n.killAfterSnapshot}
		if n.BigSnapshots {
			kinds = append(kinds[:0:0], n.cutSnapshotStream, n.isolatePastCompaction, n.killAfterSnapshot)
		}
		n.snapshotFaults++
		return kinds[(n.snapshotFaults-1)%len(kinds)](ctx, rng)
	}
}

func (n *Nemesis) healLinks(context.Context) {
	n.Sup.Heal()
	n.record("heal", history.Value{})
}

// restart returns the heal of a kill: start the members again.
func (n *Nemesis) restart(nodes []int) func(context.Context) {
	return func(context.Context) {
		for _, id := range nodes {
			if err := n.Sup.StartNode(id); err != nil {
				n.Log.Error("restart failed", "node", id, "err", err)
			}
		}
		n.record("start", history.Value{Nodes: nodes})
	}
}

func linkList(links [][2]int) [][]int {
	out := make([][]int, len(links))
	for i, l := range links {
		out[i] = []int{l[0], l[1]}
	}
	return out
}

// oneWay draws directed links to cut, leaving their reverses up: a member
// that can hear but not speak (or the leader so), one that can speak but
// not hear, or a single direction between two members.
func (n *Nemesis) oneWay(ctx context.Context, rng *rand.Rand) [][2]int {
	ids := n.Sup.IDs()
	who := ids[rng.IntN(len(ids))]
	shape := rng.IntN(4)
	if shape == 0 {
		if l := n.Sup.Leader(ctx); l != 0 {
			who = l
		}
		shape = 1
	}
	var links [][2]int
	for _, l := range n.Sup.Links() {
		switch {
		case shape == 1 && l[0] == who, // mute: its messages are lost
			shape == 2 && l[1] == who: // deaf: it hears nobody
			links = append(links, l)
		}
	}
	if shape == 3 {
		other := ids[(slices.Index(ids, who)+1+rng.IntN(len(ids)-1))%len(ids)]
		links = [][2]int{{who, other}}
	}
	return links
}

// clock changes the targets' clock rates or makes them jump: forward (a
// member that expires leases early) or back (its clock stands still until
// real time catches up, so its deadlines come late).
func (n *Nemesis) clock(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	nodes := n.targets(ctx, rng)
	rates := []float64{0.25, 0.5, 2, 4}
	var parts []string
	for _, id := range nodes {
		rate, offset := 1.0, int64(0)
		if rng.IntN(2) == 0 {
			rate = rates[rng.IntN(len(rates))]
		} else {
			offset = 100 + rng.Int64N(2900)
			if rng.IntN(2) == 0 {
				offset = -offset
			}
		}
		if err := n.Sup.SetClock(ctx, id, rate, offset); err != nil {
			n.Log.Warn("clock fault not applied", "node", id, "err", err)
			continue
		}
		n.record("clock", history.Value{Node: history.Ptr(id), Rate: history.Ptr(rate), OffsetMS: history.Ptr(offset)})
		parts = append(parts, fmt.Sprintf("%d@%gx%+dms", id, rate, offset))
	}
	return func(ctx context.Context) {
		for _, id := range nodes {
			if err := n.Sup.SetClock(ctx, id, 1, 0); err == nil {
				n.record("clock", history.Value{Node: history.Ptr(id), Rate: history.Ptr(1.0), OffsetMS: history.Ptr[int64](0)})
			}
		}
	}, "clock " + strings.Join(parts, " ")
}

// net slows (delay with jitter) or thins (message loss) some directed
// links, or both: every link of one member, every link, or a random half.
// Its end is a heal naming the links.
func (n *Nemesis) net(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	all := n.Sup.Links()
	var links [][2]int
	switch rng.IntN(3) {
	case 0:
		who := n.Sup.IDs()[rng.IntN(len(n.Sup.IDs()))]
		for _, l := range all {
			if l[0] == who || l[1] == who {
				links = append(links, l)
			}
		}
	case 1:
		links = all
	default:
		for _, l := range all {
			if rng.IntN(2) == 0 {
				links = append(links, l)
			}
		}
		if len(links) == 0 {
			links = all[:1]
		}
	}
	var f LinkFault
	var desc []string
	kind := rng.IntN(5) // 0-1 delay, 2-3 loss, 4 both
	if kind <= 1 || kind == 4 {
		f.Delay = time.Duration(5+rng.IntN(146)) * time.Millisecond
		f.Jitter = time.Duration(rng.Int64N(int64(f.Delay) + 1)).Truncate(time.Millisecond)
		n.record("delay", history.Value{Links: linkList(links), DelayMS: history.Ptr(f.Delay.Milliseconds()), JitterMS: history.Ptr(f.Jitter.Milliseconds())})
		desc = append(desc, fmt.Sprintf("delay %v±%v", f.Delay, f.Jitter))
	}
	if kind >= 2 {
		f.Loss = []float64{0.05, 0.1, 0.2, 0.4}[rng.IntN(4)]
		n.record("loss", history.Value{Links: linkList(links), Loss: history.Ptr(f.Loss)})
		desc = append(desc, fmt.Sprintf("loss %g", f.Loss))
	}
	n.Sup.SetLinkFault(links, f)
	return func(context.Context) {
		n.Sup.SetLinkFault(links, LinkFault{})
		n.record("heal", history.Value{Links: linkList(links)})
	}, fmt.Sprintf("%s on %d links", strings.Join(desc, " + "), len(links))
}

// snapshotWait bounds how long a snapshot fault waits for its moment.
const snapshotWait = 10 * time.Second

// killAfterSnapshot watches one member's snapshot counter and kills it with
// SIGKILL as soon as the counter moves: the crash lands just after the
// snapshot and the log compaction were written. If no snapshot comes within
// the bound the member is killed anyway.
func (n *Nemesis) killAfterSnapshot(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	ids := n.Sup.IDs()
	id := ids[rng.IntN(len(ids))]
	if rng.IntN(2) == 0 {
		if l := n.Sup.Leader(ctx); l != 0 {
			id = l
		}
	}
	n.setCurrent("waiting for a snapshot of %d", id)
	moved := n.watch(ctx, id, snapshotWait, 5*time.Millisecond, func(first, now MemberMetrics) bool {
		return now.Snapshots > first.Snapshots
	})
	if moved {
		n.Counts.AfterSnapshot.Add(1)
	} else {
		n.Counts.SnapshotTimeout.Add(1)
	}
	n.Sup.kill(id) // just read: no second reading before the kill
	n.record("kill", history.Value{Nodes: []int{id}})
	return n.restart([]int{id}), fmt.Sprintf("kill %d after a snapshot", id)
}

// watch polls member id's metrics every period until done(first, latest)
// holds (true), the bound passes or ctx ends (false). A member that does
// not answer yet (restarting, paused) is polled again.
func (n *Nemesis) watch(ctx context.Context, id int, bound, period time.Duration, done func(first, now MemberMetrics) bool) bool {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var first *MemberMetrics
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		m, err := n.Sup.Metrics(rctx, id)
		rcancel()
		if err == nil {
			if first == nil {
				first = &m
			}
			if done(*first, m) {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// isolatePastCompaction cuts a follower off until the leader has compacted
// its log past the follower's applied index (so only a snapshot can bring
// it back), heals, and kills the follower while the leader's snapshot is
// on its way or being installed (at a drawn moment up to 60 ms after the
// heal, or as soon as the install is seen done, whichever comes first: on
// loopback the install takes a few tens of milliseconds after the heal).
// The restart is the fault's heal.
func (n *Nemesis) isolatePastCompaction(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	killAfter := time.Duration(rng.IntN(61)) * time.Millisecond
	f, past := n.isolatePastLeader(ctx, rng)
	before, _ := n.Sup.Metrics(ctx, f)
	n.Sup.Heal()
	n.record("heal", history.Value{})
	n.setCurrent("kill %d during its snapshot install", f)
	installed := n.watch(ctx, f, killAfter, time.Millisecond, func(_, now MemberMetrics) bool {
		return now.Installed > before.Installed
	})
	n.Sup.kill(f)
	n.record("kill", history.Value{Nodes: []int{f}})
	if past {
		if installed {
			n.Counts.AfterInstall.Add(1)
		} else {
			n.Counts.DuringInstall.Add(1)
		}
	}
	return n.restart([]int{f}), fmt.Sprintf("isolate %d past compaction, heal, kill", f)
}

// isolatePastLeader cuts a follower drawn by rng off until the leader has
// compacted its log past the follower's applied index, or the bound
// passed (past false), and returns it, still cut off.
func (n *Nemesis) isolatePastLeader(ctx context.Context, rng *rand.Rand) (f int, past bool) {
	leader := n.Sup.Leader(ctx)
	var others []int
	for _, id := range n.Sup.IDs() {
		if id != leader {
			others = append(others, id)
		}
	}
	f = others[rng.IntN(len(others))]
	var rest []int
	for _, id := range n.Sup.IDs() {
		if id != f {
			rest = append(rest, id)
		}
	}
	n.record("partition", history.Value{Groups: [][]int{{f}, rest}})
	n.Sup.SetLinks(func(i, j int) bool { return i != f && j != f })
	n.setCurrent("isolate %d until the leader compacts past it", f)
	past = n.compactedPast(ctx, f)
	if past {
		n.Counts.Compacted.Add(1)
	} else {
		n.Counts.SnapshotTimeout.Add(1)
	}
	return f, past
}

// cutSnapshotStream is the failpoint of a snapshot transfer: it cuts a
// follower off until the leader compacted past it, arms every link into
// it to cut the next snapshot stream once a drawn share (5 to 95 %) of
// the data went through, heals, and waits (up to the bound) for the cut.
// The follower stays up: it must throw away what it received (rule 10:
// a snapshot reaches raft only whole with its announced size and
// SHA-256), and the leader sends the snapshot again, whole. Only a
// snapshot of several chunks can be cut before its end: a run with held
// locks (chaos --held) has them.
func (n *Nemesis) cutSnapshotStream(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	frac := 0.05 + 0.9*rng.Float64()
	f, _ := n.isolatePastLeader(ctx, rng)
	done := n.Sup.ArmSnapshotCut(f, frac)
	defer n.Sup.DisarmSnapshotCut(f)
	n.Sup.Heal()
	n.record("heal", history.Value{})
	n.setCurrent("cut the snapshot stream to %d at %.0f%%", f, 100*frac)
	wait := time.NewTimer(snapshotWait)
	defer wait.Stop()
	for {
		select {
		case c := <-done:
			if !c.Cut {
				continue // a stream that ended first; another link may still cut
			}
			n.Counts.SnapshotCuts.Add(1)
			n.record("snapshot-cut", history.Value{Links: [][]int{{c.From, c.To}}})
			return func(context.Context) {}, fmt.Sprintf("cut the snapshot stream %d->%d after %d of %d bytes", c.From, c.To, c.Forwarded, c.Size)
		case <-wait.C:
		case <-ctx.Done():
		}
		n.Counts.SnapshotTimeout.Add(1)
		return func(context.Context) {}, fmt.Sprintf("isolate %d past compaction, heal: no snapshot stream to cut", f)
	}
}

// compactedPast waits, up to the bound, until some leader's first stored
// index is above member f's applied index.
func (n *Nemesis) compactedPast(ctx context.Context, f int) bool {
	ctx, cancel := context.WithTimeout(ctx, snapshotWait)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		var mf MemberMetrics
		var errf error
		wg.Add(1)
		go func() {
			defer wg.Done()
			mf, errf = n.Sup.Metrics(ctx, f)
		}()
		leader := n.Sup.Leader(ctx)
		wg.Wait()
		if leader != 0 && leader != f && errf == nil {
			if ml, err := n.Sup.Metrics(ctx, leader); err == nil && ml.FirstIndex > mf.Applied {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
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

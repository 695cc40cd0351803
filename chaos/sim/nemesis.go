package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

// nemesis injects one fault at a time on a schedule drawn from the seed:
// the families come in rounds, each a seeded shuffle of the enabled ones,
// so every family fires in a run of a few rounds. Faults are recorded in
// the history as the chaos harness records them (chaos/nemesis.go), after
// they take effect, so the checker's clock model reads them the same way.
type nemesis struct {
	s        *sim
	rng      *rand.Rand
	round    []string
	injected int
	heal     func() // the fault in force, nil: none
	stopped  bool
}

func newNemesis(s *sim) *nemesis {
	return &nemesis{s: s, rng: rand.New(rand.NewPCG(s.cfg.Seed, 0x6e656d65))}
}

func jitter(rng *rand.Rand, d time.Duration) int64 {
	return int64(d/2) + rng.Int64N(int64(d)+1)
}

// step injects the next fault and schedules its heal, then the next step.
func (n *nemesis) step() {
	s := n.s
	if n.stopped || (s.cfg.MaxFaults > 0 && n.injected >= s.cfg.MaxFaults) {
		return
	}
	if s.mem.busy() {
		// A membership change runs alone, to its end (membership.go).
		s.sch.after(int64(100*time.Millisecond), n.step)
		return
	}
	if len(n.round) == 0 {
		n.round = slices.Clone(s.cfg.Faults)
		n.rng.Shuffle(len(n.round), func(i, j int) { n.round[i], n.round[j] = n.round[j], n.round[i] })
	}
	family := n.round[0]
	n.round = n.round[1:]
	if slices.Contains(s.cfg.SkipFaults, n.injected+1) {
		// Skipped (by shrinking): the schedule goes on as if this fault had
		// come and gone, so the faults after it keep their turn.
		n.injected++
		if s.tr.on() {
			s.tr.printf("fault %d (%s) skipped", n.injected, family)
		}
		s.sch.after(jitter(n.rng, s.cfg.FaultDuration)+jitter(n.rng, s.cfg.FaultInterval), n.step)
		return
	}
	heal := n.inject(family)
	if heal == nil {
		s.sch.after(jitter(n.rng, s.cfg.FaultInterval), n.step)
		return
	}
	n.injected++
	s.stats.Faults[family]++
	n.heal = heal
	s.sch.after(jitter(n.rng, s.cfg.FaultDuration), func() {
		if n.heal == nil {
			return // healed by stop
		}
		n.heal()
		n.heal = nil
		s.sch.after(jitter(n.rng, s.cfg.FaultInterval), n.step)
	})
}

// stop heals the fault in force and injects no more.
func (n *nemesis) stop() {
	n.stopped = true
	if n.heal != nil {
		n.heal()
		n.heal = nil
	}
	// A member stopped by an I/O error after its disk fault healed, or a
	// member paused: nothing stays broken past the workload.
	for _, m := range n.s.nodes {
		m.ioErr, m.slowSync = 0, 0
	}
}

func (n *nemesis) record(f string, v history.Value) {
	n.s.record(history.Nemesis, history.Info, f, "", v)
}

// targets picks members that are up: one, the leader, a minority or a
// majority; nil if none is up.
func (n *nemesis) targets() []int {
	s := n.s
	var ids []int
	for _, m := range s.nodes {
		if m.up() {
			ids = append(ids, int(m.id))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	n.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	all := s.cfg.Nodes
	var out []int
	switch n.rng.IntN(4) {
	case 0:
		out = ids[:1]
	case 1:
		if l := s.leader(); l != nil {
			out = []int{int(l.id)}
		} else {
			out = ids[:1]
		}
	case 2:
		out = ids[:min(len(ids), max(1, (all-1)/2))]
	default:
		out = ids[:min(len(ids), all/2+1)]
	}
	out = slices.Clone(out)
	slices.Sort(out)
	return out
}

func (n *nemesis) ids() []int { return n.s.memberIDs() }

// inject starts one fault of family and returns its heal (nil: nothing
// to do, e.g. every member is already down).
func (n *nemesis) inject(family string) func() {
	s := n.s
	if s.tr.on() {
		s.tr.printf("fault %s", family)
	}
	switch family {
	case "kill", "crash":
		switch n.rng.IntN(4) {
		case 0:
			return n.crashAtSnapshot(family == "crash")
		case 1:
			if heal := n.crashAtGrantCommit(); heal != nil {
				return heal
			}
		case 2:
			if heal := n.breakTransfer(family); heal != nil {
				return heal
			}
		}
		nodes := n.targets()
		if nodes == nil {
			return nil
		}
		for _, id := range nodes {
			s.crash(s.nodes[id-1], family == "crash")
		}
		// A power loss is a kill the disk remembers less of: the history
		// knows kills only.
		n.record("kill", history.Value{Nodes: nodes})
		return func() {
			var started []int
			for _, id := range nodes {
				if m := s.nodes[id-1]; m.restartable() {
					s.start(m)
					started = append(started, id)
				}
			}
			if len(started) > 0 {
				n.record("start", history.Value{Nodes: started})
			}
		}
	case "pause":
		nodes := n.targets()
		if nodes == nil {
			return nil
		}
		if n.rng.IntN(5) == 0 {
			nodes = nil // the whole cluster: a frozen host
			for _, m := range s.nodes {
				if m.up() {
					nodes = append(nodes, int(m.id))
				}
			}
		}
		for _, id := range nodes {
			s.nodes[id-1].paused = true
		}
		n.record("pause", history.Value{Nodes: nodes})
		return func() {
			for _, id := range nodes {
				m := s.nodes[id-1]
				if m.paused {
					m.paused = false
					s.resume(m)
					s.drain(m)
				}
			}
			n.record("resume", history.Value{Nodes: nodes})
		}
	case "partition":
		if n.rng.IntN(4) == 0 {
			if heal := n.breakTransfer(family); heal != nil {
				return heal
			}
		}
		if n.rng.IntN(3) == 0 {
			links := n.oneWay()
			for _, l := range links {
				s.link(uint64(l[0]), uint64(l[1])).cut = true
			}
			n.record("partition", history.Value{Links: links})
			return n.healLinks
		}
		groups, connected := n.partition()
		for _, l := range s.sortedLinks() {
			s.link(l[0], l[1]).cut = !connected(int(l[0]), int(l[1]))
		}
		n.record("partition", history.Value{Groups: groups})
		return n.healLinks
	case "net":
		return n.net()
	case "clock":
		return n.clock()
	case "disk":
		return n.disk()
	case "membership":
		return n.membership()
	}
	panic(fmt.Sprintf("unknown fault family %q", family))
}

// sortedLinks lists every directed link between members in order.
func (s *sim) sortedLinks() [][2]uint64 {
	var out [][2]uint64
	ids := s.memberIDs()
	for _, i := range ids {
		for _, j := range ids {
			if i != j {
				out = append(out, [2]uint64{uint64(i), uint64(j)})
			}
		}
	}
	return out
}

func (n *nemesis) healLinks() {
	for _, l := range n.s.sortedLinks() {
		n.s.link(l[0], l[1]).cut = false
	}
	n.record("heal", history.Value{})
}

// oneWay draws directed links to cut, leaving their reverses up: a member
// that cannot speak (or the leader so), one that cannot hear, or a single
// direction between two members.
func (n *nemesis) oneWay() [][]int {
	s := n.s
	ids := n.ids()
	who := ids[n.rng.IntN(len(ids))]
	shape := n.rng.IntN(4)
	if shape == 0 {
		if l := s.leader(); l != nil {
			who = int(l.id)
		}
		shape = 1
	}
	var links [][]int
	for _, l := range s.sortedLinks() {
		switch {
		case shape == 1 && int(l[0]) == who, shape == 2 && int(l[1]) == who:
			links = append(links, []int{int(l[0]), int(l[1])})
		}
	}
	if shape == 3 {
		other := ids[(slices.Index(ids, who)+1+n.rng.IntN(len(ids)-1))%len(ids)]
		links = [][]int{{who, other}}
	}
	return links
}

// partition draws a shape: isolate one member, isolate the leader, majority
// and minority halves, and with five members a majorities ring or a bridge.
func (n *nemesis) partition() ([][]int, func(i, j int) bool) {
	s := n.s
	ids := n.ids()
	shapes := []string{"one", "leader", "halves"}
	if len(ids) >= 5 {
		shapes = append(shapes, "ring", "bridge")
	}
	n.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	split := func(a []int) ([][]int, func(i, j int) bool) {
		side := make([]bool, len(s.nodes)+1)
		for _, id := range a {
			side[id] = true
		}
		var b []int
		for _, id := range n.ids() {
			if !side[id] {
				b = append(b, id)
			}
		}
		a = slices.Clone(a)
		slices.Sort(a)
		return [][]int{a, b}, func(i, j int) bool { return side[i] == side[j] }
	}
	switch shapes[n.rng.IntN(len(shapes))] {
	case "one":
		return split(ids[:1])
	case "leader":
		if l := s.leader(); l != nil {
			return split([]int{int(l.id)})
		}
		return split(ids[:1])
	case "halves":
		return split(ids[:len(ids)/2])
	case "ring":
		pos := make([]int, len(s.nodes)+1)
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
	default: // bridge: two halves joined by one member that sees both
		bridge := ids[0]
		left := make([]bool, len(s.nodes)+1)
		for _, id := range ids[1 : 1+(len(ids)-1)/2] {
			left[id] = true
		}
		var a, b []int
		for _, id := range n.ids() {
			switch {
			case id == bridge:
			case left[id]:
				a = append(a, id)
			default:
				b = append(b, id)
			}
		}
		ga := append(slices.Clone(a), bridge)
		gb := append(slices.Clone(b), bridge)
		slices.Sort(ga)
		slices.Sort(gb)
		return [][]int{ga, gb}, func(i, j int) bool {
			return i == bridge || j == bridge || left[i] == left[j]
		}
	}
}

// net slows, thins, duplicates and reorders the messages of some directed
// links: every link of one member, every link, or a random half.
func (n *nemesis) net() func() {
	s := n.s
	all := s.sortedLinks()
	var links [][2]uint64
	switch n.rng.IntN(3) {
	case 0:
		ids := n.ids()
		who := uint64(ids[n.rng.IntN(len(ids))])
		for _, l := range all {
			if l[0] == who || l[1] == who {
				links = append(links, l)
			}
		}
	case 1:
		links = all
	default:
		for _, l := range all {
			if n.rng.IntN(2) == 0 {
				links = append(links, l)
			}
		}
		if len(links) == 0 {
			links = all[:1]
		}
	}
	hl := make([][]int, len(links))
	for i, l := range links {
		hl[i] = []int{int(l[0]), int(l[1])}
	}
	var f link
	kind := n.rng.IntN(5) // 0-1 delay, 2-3 loss, 4 both
	if kind <= 1 || kind == 4 {
		f.delay = int64(5+n.rng.IntN(146)) * int64(time.Millisecond)
		f.jitter = (n.rng.Int64N(f.delay+1) / int64(time.Millisecond)) * int64(time.Millisecond)
		n.record("delay", history.Value{Links: hl, DelayMS: history.Ptr(f.delay / 1e6), JitterMS: history.Ptr(f.jitter / 1e6)})
	}
	if kind >= 2 {
		f.loss = []float64{0.05, 0.1, 0.2, 0.4}[n.rng.IntN(4)]
		n.record("loss", history.Value{Links: hl, Loss: history.Ptr(f.loss)})
	}
	if n.rng.IntN(3) == 0 {
		f.dup = []float64{0.05, 0.2, 0.5}[n.rng.IntN(3)]
		f.jitter = max(f.jitter, int64(20*time.Millisecond)) // duplicates and reordering go together
		n.record("duplicate", history.Value{Links: hl, Loss: history.Ptr(f.dup)})
	}
	touched := make([]bool, len(s.nodes)+1)
	for _, l := range links {
		*s.link(l[0], l[1]) = f
		touched[l[0]], touched[l[1]] = true, true
	}
	for id, t := range touched {
		if t {
			s.nodes[id-1].clientDelay = f.delay
		}
	}
	return func() {
		for _, l := range links {
			*s.link(l[0], l[1]) = link{cut: s.link(l[0], l[1]).cut}
		}
		for _, m := range s.nodes {
			m.clientDelay = 0
		}
		n.record("heal", history.Value{Links: hl})
	}
}

// clock runs the targets' clocks at 0.25x to 4x, or makes them jump 0.1 to
// 3 s forward or back; ticks and lease deadlines follow.
func (n *nemesis) clock() func() {
	s := n.s
	nodes := n.targets()
	if nodes == nil {
		return nil
	}
	rates := []float64{0.25, 0.5, 2, 4}
	for _, id := range nodes {
		rate, offset := 1.0, int64(0)
		if n.rng.IntN(2) == 0 {
			rate = rates[n.rng.IntN(len(rates))]
		} else {
			offset = 100 + n.rng.Int64N(2900)
			if n.rng.IntN(2) == 0 {
				offset = -offset
			}
		}
		m := s.nodes[id-1]
		m.clk.set(s.sch.now, rate, offset*int64(time.Millisecond))
		s.scheduleTick(m)
		n.record("clock", history.Value{Node: history.Ptr(id), Rate: history.Ptr(rate), OffsetMS: history.Ptr(offset)})
	}
	return func() {
		for _, id := range nodes {
			m := s.nodes[id-1]
			if !m.up() {
				continue // a restart gave it a true clock
			}
			m.clk.set(s.sch.now, 1, 0)
			s.scheduleTick(m)
			n.record("clock", history.Value{Node: history.Ptr(id), Rate: history.Ptr(1.0), OffsetMS: history.Ptr[int64](0)})
		}
	}
}

// disk makes the targets' writes fail now and then (the member stops, and
// the heal restarts it from its disk) or their syncs slow (the member is
// blocked meanwhile), or both.
func (n *nemesis) disk() func() {
	s := n.s
	nodes := n.targets()
	if nodes == nil {
		return nil
	}
	for _, id := range nodes {
		m := s.nodes[id-1]
		switch n.rng.IntN(3) {
		case 0:
			m.ioErr = []float64{0.01, 0.05, 0.2}[n.rng.IntN(3)]
		case 1:
			m.slowSync = []float64{0.2, 0.5, 1}[n.rng.IntN(3)]
			m.slowMax = int64(20+n.rng.IntN(480)) * int64(time.Millisecond)
		default:
			m.ioErr = 0.02
			m.slowSync, m.slowMax = 0.3, int64(200*time.Millisecond)
		}
		if s.tr.on() {
			s.tr.printf("disk node=%d io-error=%g slow-sync=%g slow-max=%dms", id, m.ioErr, m.slowSync, m.slowMax/1e6)
		}
	}
	n.record("disk", history.Value{Nodes: nodes})
	return func() {
		var started []int
		for _, id := range nodes {
			m := s.nodes[id-1]
			m.ioErr, m.slowSync = 0, 0
			if m.stopped {
				s.start(m)
				started = append(started, id)
			}
		}
		if len(started) > 0 {
			n.record("start", history.Value{Nodes: started})
		}
		n.record("heal", history.Value{Nodes: nodes})
	}
}

// crashAtSnapshot is the chaos harness's snapshot nemesis, with the moment
// hit exactly: either a member crashes right after it stores a snapshot of
// its own (a compaction), or a follower is cut off until the leader has
// compacted its log past it, the cut heals, and the follower crashes right
// after it installs the leader's snapshot (its acknowledgement on the
// wire). If the moment does not come before the fault's end, nothing
// crashes.
func (n *nemesis) crashAtSnapshot(powerLoss bool) func() {
	s := n.s
	var up []*node
	for _, m := range s.nodes {
		if m.up() {
			up = append(up, m)
		}
	}
	leader := s.leader()
	if len(up) == 0 || leader == nil {
		return nil
	}
	var victim *node
	cut := false
	if n.rng.IntN(2) == 0 {
		victim = up[n.rng.IntN(len(up))]
	} else {
		var followers []*node
		for _, m := range up {
			if m != leader {
				followers = append(followers, m)
			}
		}
		if len(followers) == 0 {
			return nil
		}
		victim = followers[n.rng.IntN(len(followers))]
		cut = true
		var rest []int
		for _, id := range n.ids() {
			if id != int(victim.id) {
				rest = append(rest, id)
			}
		}
		for _, l := range s.sortedLinks() {
			s.link(l[0], l[1]).cut = l[0] == victim.id || l[1] == victim.id
		}
		n.record("partition", history.Value{Groups: [][]int{{int(victim.id)}, rest}})
	}
	if s.tr.on() {
		s.tr.printf("fault crash-at-snapshot node=%d isolate=%v power-loss=%v", victim.id, cut, powerLoss)
	}
	armed := func() {
		victim.onSnapshot = func(installed bool) {
			victim.onSnapshot = nil
			if installed {
				s.stats.CrashAfterInstall++
			} else {
				s.stats.CrashAfterSnapshot++
			}
			// After the current Ready: the acknowledgement is on its way.
			s.sch.after(1, func() {
				if victim.up() {
					s.crash(victim, powerLoss)
					n.record("kill", history.Value{Nodes: []int{int(victim.id)}})
				}
			})
		}
	}
	done := false
	if cut {
		// Heal once the leader's log starts above what the victim applied
		// (polled every 20ms): only a snapshot can bring it back.
		var poll func()
		poll = func() {
			if done {
				return
			}
			l := s.leader()
			if st, ok := s.status(victim); l != nil && l != victim && ok {
				first, _ := l.disk.FirstIndex()
				if first > st.Applied+1 {
					for _, lk := range s.sortedLinks() {
						s.link(lk[0], lk[1]).cut = false
					}
					n.record("heal", history.Value{})
					cut = false
					armed()
					return
				}
			}
			s.sch.after(int64(20*time.Millisecond), poll)
		}
		poll()
	} else {
		armed()
	}
	return func() {
		done = true
		victim.onSnapshot = nil
		if cut {
			for _, lk := range s.sortedLinks() {
				s.link(lk[0], lk[1]).cut = false
			}
			n.record("heal", history.Value{})
		}
		if victim.restartable() {
			s.start(victim)
			n.record("start", history.Value{Nodes: []int{int(victim.id)}})
		}
	}
}

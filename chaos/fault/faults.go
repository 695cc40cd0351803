package fault

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

// Kill stops members: SIGKILL, or in the simulator a crash (a power loss
// when the family is crash).
type Kill struct{ Nodes []int }

// Record writes the kill.
func (k Kill) Record(r Recorder) { record(r, history.FaultKill, history.Value{Nodes: k.Nodes}) }

// Start is a kill undone: the members started again.
type Start struct{ Nodes []int }

// Record writes the start.
func (s Start) Record(r Recorder) { record(r, history.FaultStart, history.Value{Nodes: s.Nodes}) }

// DrawKill draws the members to kill (Targets).
func DrawKill(rng *rand.Rand, c Cluster) Kill { return Kill{Nodes: Targets(rng, c)} }

// Pause freezes members (SIGSTOP; a frozen member in the simulator).
type Pause struct{ Nodes []int }

// Record writes the pause.
func (p Pause) Record(r Recorder) { record(r, history.FaultPause, history.Value{Nodes: p.Nodes}) }

// Resume is a pause undone.
type Resume struct{ Nodes []int }

// Record writes the resume.
func (p Resume) Record(r Recorder) { record(r, history.FaultResume, history.Value{Nodes: p.Nodes}) }

// DrawPause draws the members to pause: the targets, or one time in five
// every member that is up (a frozen host or hypervisor). No nodes: none
// is up.
func DrawPause(rng *rand.Rand, c Cluster) Pause {
	nodes := Targets(rng, c)
	if nodes == nil {
		return Pause{}
	}
	if rng.IntN(5) == 0 {
		nodes = c.Up()
	}
	return Pause{Nodes: nodes}
}

// ClientPause stops workload client processes (SIGSTOP), each named by
// the history process it was running.
type ClientPause struct{ Processes []history.Process }

// Record writes the pause.
func (p ClientPause) Record(r Recorder) {
	record(r, history.FaultClientPause, history.Value{Processes: p.Processes})
}

// ClientResume is a client pause undone (SIGCONT).
type ClientResume struct{ Processes []history.Process }

// Record writes the resume.
func (p ClientResume) Record(r Recorder) {
	record(r, history.FaultClientResume, history.Value{Processes: p.Processes})
}

// Cut is a fault on the links between members: a Partition or a OneWay.
type Cut interface {
	Fault
	// Connected says whether the directed link from i to j stays up.
	Connected(from, to int) bool
}

// DrawCut draws a cut: one time in three a one-way cut, else a
// partition's shape.
func DrawCut(rng *rand.Rand, c Cluster) Cut {
	if rng.IntN(3) == 0 {
		return DrawOneWay(rng, c)
	}
	return DrawPartition(rng, c)
}

// Shape is a partition's shape.
type Shape string

// The shapes: isolate one member, isolate the leader, majority and
// minority halves, and with five members a ring of majorities or a
// bridge.
const (
	ShapeOne    Shape = "one"
	ShapeLeader Shape = "leader"
	ShapeHalves Shape = "halves"
	ShapeRing   Shape = "ring"
	ShapeBridge Shape = "bridge"
)

// Partition splits the members into groups whose links between them are
// cut both ways.
type Partition struct {
	Shape  Shape
	Groups [][]int
	ring   []int // ShapeRing: the members in ring order
	bridge int   // ShapeBridge: the member in both groups
}

// Record writes the partition's groups.
func (p Partition) Record(r Recorder) {
	record(r, history.FaultPartition, history.Value{Groups: p.Groups})
}

// Connected says whether i and j can talk: in a ring, neighbours can; in a
// bridge, the bridge with everyone and each half within itself; otherwise
// the members of one group.
func (p Partition) Connected(i, j int) bool {
	switch p.Shape {
	case ShapeRing:
		n := len(p.ring)
		d := (slices.Index(p.ring, i) - slices.Index(p.ring, j) + n) % n
		return d <= 1 || d == n-1
	case ShapeBridge:
		if i == p.bridge || j == p.bridge {
			return true
		}
	}
	return slices.Contains(p.Groups[0], i) == slices.Contains(p.Groups[0], j)
}

// Isolate is the partition that cuts member id off from the others.
func Isolate(c Cluster, id int) Partition { return split(c, []int{id}) }

// split is the partition of the members into a and the rest.
func split(c Cluster, a []int) Partition {
	var b []int
	for _, id := range c.Members() {
		if !slices.Contains(a, id) {
			b = append(b, id)
		}
	}
	a = slices.Clone(a)
	slices.Sort(a)
	return Partition{Shape: ShapeOne, Groups: [][]int{a, b}}
}

// DrawPartition draws a shape and the members in it.
func DrawPartition(rng *rand.Rand, c Cluster) Partition {
	ids := c.Members()
	shapes := []Shape{ShapeOne, ShapeLeader, ShapeHalves}
	if len(ids) >= 5 {
		shapes = append(shapes, ShapeRing, ShapeBridge)
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	shape := shapes[rng.IntN(len(shapes))]
	var p Partition
	switch shape {
	case ShapeOne:
		p = split(c, ids[:1])
	case ShapeLeader:
		if l := c.Leader(); l != 0 {
			p = split(c, []int{l})
		} else {
			p = split(c, ids[:1])
		}
	case ShapeHalves:
		p = split(c, ids[:len(ids)/2])
	case ShapeRing:
		p = ring(ids)
	default:
		p = bridge(c, ids)
	}
	p.Shape = shape
	return p
}

// ring: each member sees its two ring neighbours, so every member has a
// majority (itself and two of five) and no two majorities agree.
func ring(ids []int) Partition {
	var groups [][]int
	for i := range ids {
		g := []int{ids[(i+len(ids)-1)%len(ids)], ids[i], ids[(i+1)%len(ids)]}
		slices.Sort(g)
		groups = append(groups, g)
	}
	return Partition{Groups: groups, ring: ids}
}

// bridge: two halves joined by one member that sees both.
func bridge(c Cluster, ids []int) Partition {
	b := ids[0]
	left := ids[1 : 1+(len(ids)-1)/2]
	var ga, gb []int
	for _, id := range c.Members() {
		switch {
		case id == b:
		case slices.Contains(left, id):
			ga = append(ga, id)
		default:
			gb = append(gb, id)
		}
	}
	ga = append(ga, b)
	gb = append(gb, b)
	slices.Sort(ga)
	slices.Sort(gb)
	return Partition{Groups: [][]int{ga, gb}, bridge: b}
}

// OneWay cuts directed links, leaving their reverses up.
type OneWay struct{ Links [][2]int }

// Record writes the cut links.
func (o OneWay) Record(r Recorder) {
	record(r, history.FaultPartition, history.Value{Links: linkList(o.Links)})
}

// Connected says whether the link from i to j is not one of the cut.
func (o OneWay) Connected(i, j int) bool { return !slices.Contains(o.Links, [2]int{i, j}) }

// DrawOneWay draws directed links to cut: a member that cannot speak (or
// the leader so), one that cannot hear, or a single direction between
// two members.
func DrawOneWay(rng *rand.Rand, c Cluster) OneWay {
	ids := c.Members()
	who := ids[rng.IntN(len(ids))]
	shape := rng.IntN(4)
	if shape == 0 {
		if l := c.Leader(); l != 0 {
			who = l
		}
		shape = 1
	}
	var links [][2]int
	for _, l := range Links(c) {
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
	return OneWay{Links: links}
}

// Heal undoes a cut, a network or a disk fault: of every link when it
// names none.
type Heal struct {
	Links [][2]int
	Nodes []int
}

// Record writes the heal.
func (h Heal) Record(r Recorder) {
	record(r, history.FaultHeal, history.Value{Links: linkList(h.Links), Nodes: h.Nodes})
}

// SnapshotCut is a snapshot stream cut mid-transfer.
type SnapshotCut struct{ From, To int }

// Record writes the cut stream's link.
func (s SnapshotCut) Record(r Recorder) {
	record(r, history.FaultSnapshotCut, history.Value{Links: [][]int{{s.From, s.To}}})
}

// Clock sets a member's clock rate, or makes it jump by OffsetMS: forward
// (a member that expires leases early) or back (its clock stands still
// until real time catches up, so its deadlines come late). Rate 1 and
// offset 0 undo it.
type Clock struct {
	Node     int
	Rate     float64
	OffsetMS int64
}

// Record writes the clock's new rate and offset.
func (c Clock) Record(r Recorder) {
	record(r, history.FaultClock, history.Value{Node: history.Ptr(c.Node), Rate: history.Ptr(c.Rate), OffsetMS: history.Ptr(c.OffsetMS)})
}

// TrueClock is the fault that gives member id its true clock back.
func TrueClock(id int) Clock { return Clock{Node: id, Rate: 1} }

// clockRates are the rates a clock fault runs a clock at.
var clockRates = [...]float64{0.25, 0.5, 2, 4}

// DrawClocks draws a clock fault for each target: a rate of 0.25x to 4x,
// or a jump of 0.1 to 3 s forward or back.
func DrawClocks(rng *rand.Rand, c Cluster) []Clock {
	var out []Clock
	for _, id := range Targets(rng, c) {
		f := Clock{Node: id, Rate: 1}
		if rng.IntN(2) == 0 {
			f.Rate = clockRates[rng.IntN(len(clockRates))]
		} else {
			f.OffsetMS = 100 + rng.Int64N(2900)
			if rng.IntN(2) == 0 {
				f.OffsetMS = -f.OffsetMS
			}
		}
		out = append(out, f)
	}
	return out
}

// Net slows (Delay, with Jitter), thins (Loss: the share of messages
// dropped) or, in the simulator, duplicates (Dup) the messages of some
// directed links.
type Net struct {
	Links  [][2]int
	Delay  time.Duration
	Jitter time.Duration
	Loss   float64
	Dup    float64
}

// Record writes the delay, the loss and the duplication in force.
func (n Net) Record(r Recorder) {
	links := linkList(n.Links)
	if n.Delay > 0 {
		record(r, history.FaultDelay, history.Value{Links: links, DelayMS: history.Ptr(n.Delay.Milliseconds()), JitterMS: history.Ptr(n.Jitter.Milliseconds())})
	}
	if n.Loss > 0 {
		record(r, history.FaultLoss, history.Value{Links: links, Loss: history.Ptr(n.Loss)})
	}
	if n.Dup > 0 {
		record(r, history.FaultDuplicate, history.Value{Links: links, Loss: history.Ptr(n.Dup)})
	}
}

// DrawNet draws the links (every link of one member, every link, or a
// random half) and what happens on them: a delay of 5 to 150 ms with a
// jitter up to it, a loss of 5 to 40 %, or both; with duplicates, also
// one time in three a duplication of 5 to 50 %.
func DrawNet(rng *rand.Rand, c Cluster, duplicates bool) Net {
	all := Links(c)
	var n Net
	switch rng.IntN(3) {
	case 0:
		ids := c.Members()
		who := ids[rng.IntN(len(ids))]
		for _, l := range all {
			if l[0] == who || l[1] == who {
				n.Links = append(n.Links, l)
			}
		}
	case 1:
		n.Links = all
	default:
		for _, l := range all {
			if rng.IntN(2) == 0 {
				n.Links = append(n.Links, l)
			}
		}
		if len(n.Links) == 0 {
			n.Links = all[:1]
		}
	}
	kind := rng.IntN(5) // 0-1 delay, 2-3 loss, 4 both
	if kind <= 1 || kind == 4 {
		n.Delay = time.Duration(5+rng.IntN(146)) * time.Millisecond
		n.Jitter = time.Duration(rng.Int64N(int64(n.Delay) + 1)).Truncate(time.Millisecond)
	}
	if kind >= 2 {
		n.Loss = []float64{0.05, 0.1, 0.2, 0.4}[rng.IntN(4)]
	}
	if duplicates && rng.IntN(3) == 0 {
		n.Dup = []float64{0.05, 0.2, 0.5}[rng.IntN(3)]
	}
	return n
}

// Disk makes members' writes fail now and then (IOErr: the share of
// writes; the member stops) or their syncs slow (SlowSync: the share of
// syncs, each up to SlowMax), or both. Only the simulator has it.
type Disk struct {
	Nodes []int
	Disks []DiskFault // one for each of Nodes
}

// DiskFault is one member's disk fault.
type DiskFault struct {
	IOErr    float64
	SlowSync float64
	SlowMax  time.Duration
}

// Record writes the members whose disk is faulty.
func (d Disk) Record(r Recorder) { record(r, history.FaultDisk, history.Value{Nodes: d.Nodes}) }

// DrawDisk draws the targets' disk faults. No nodes: none is up.
func DrawDisk(rng *rand.Rand, c Cluster) Disk {
	var d Disk
	d.Nodes = Targets(rng, c)
	for range d.Nodes {
		var f DiskFault
		switch rng.IntN(3) {
		case 0:
			f.IOErr = []float64{0.01, 0.05, 0.2}[rng.IntN(3)]
		case 1:
			f.SlowSync = []float64{0.2, 0.5, 1}[rng.IntN(3)]
			f.SlowMax = time.Duration(20+rng.IntN(480)) * time.Millisecond
		default:
			f.IOErr = 0.02
			f.SlowSync, f.SlowMax = 0.3, 200*time.Millisecond
		}
		d.Disks = append(d.Disks, f)
	}
	return d
}

// Garbage sends malformed and forged frames to members' ports (the
// garbage families of the real-process harness).
type Garbage struct {
	Family Family // FamilyGarbage or FamilyGarbageHeartbeat
	Nodes  []int
	End    bool // the family's sending is over
}

// Record writes the start or the end of the sending.
func (g Garbage) Record(r Recorder) {
	f := history.FaultGarbage
	switch {
	case g.Family == FamilyGarbageHeartbeat && g.End:
		f = history.FaultGarbageHeartbeatEnd
	case g.Family == FamilyGarbageHeartbeat:
		f = history.FaultGarbageHeartbeat
	case g.End:
		f = history.FaultGarbageEnd
	}
	record(r, f, history.Value{Nodes: g.Nodes})
}

// DrawGarbage draws the members a garbage family sends to (Targets).
func DrawGarbage(rng *rand.Rand, c Cluster, f Family) Garbage {
	return Garbage{Family: f, Nodes: Targets(rng, c)}
}

// Member is a step of a membership fault: Step is history.FaultMemberRemove,
// FaultMemberRemoved, FaultMemberAdd or FaultMemberPromote.
type Member struct {
	Step string
	Node int
}

// Record writes the step.
func (m Member) Record(r Recorder) { record(r, m.Step, history.Value{Nodes: []int{m.Node}}) }

// Replace is a membership fault: remove Victim, then add a new member
// that catches up (by snapshot when the leader compacted past it) and is
// promoted.
type Replace struct{ Victim int }

// DrawReplace draws the member to replace: any member, or one time in
// three the leader.
func DrawReplace(rng *rand.Rand, c Cluster) Replace {
	ids := c.Members()
	victim := ids[rng.IntN(len(ids))]
	if rng.IntN(3) == 0 {
		if l := c.Leader(); l != 0 {
			victim = l
		}
	}
	return Replace{Victim: victim}
}

// Fixed is a Cluster whose answers are given: every member up.
type Fixed struct {
	IDs  []int
	Lead int
}

// Members are the IDs.
func (f Fixed) Members() []int { return slices.Clone(f.IDs) }

// Up are the IDs.
func (f Fixed) Up() []int { return slices.Clone(f.IDs) }

// Leader is Lead.
func (f Fixed) Leader() int { return f.Lead }

// Power is a power failure of members: each is killed, its disk loses
// what was not synced, and it starts again later (Start). Torn says, for
// each of Nodes, whether its disk tears its unsynced writes (keeps a
// page-aligned prefix of each file's, as a disk that lost power part of
// the way through writing them back) rather than drop them all.
type Power struct {
	Nodes []int
	Torn  []bool
}

// Record writes the kill the power failure begins with; each member's
// cut is recorded after it (PowerCut), once the disk says what it
// dropped.
func (p Power) Record(r Recorder) { Kill{Nodes: p.Nodes}.Record(r) }

// DrawPower draws a power failure: of every member when all (the
// coordinated failure), else of one member, the leader one time in
// three; then, for each, one time in three a torn cut. No nodes: none is
// up.
func DrawPower(rng *rand.Rand, c Cluster, all bool) Power {
	ids := c.Up()
	if len(ids) == 0 {
		return Power{}
	}
	var p Power
	if all {
		p.Nodes = ids
	} else {
		id := ids[rng.IntN(len(ids))]
		if rng.IntN(3) == 0 {
			if l := c.Leader(); l != 0 && slices.Contains(ids, l) {
				id = l
			}
		}
		p.Nodes = []int{id}
	}
	for range p.Nodes {
		p.Torn = append(p.Torn, rng.IntN(3) == 0)
	}
	return p
}

// PowerCut is what a power failure's cut dropped of one member's disk.
type PowerCut struct {
	Node int
	Cut  history.PowerCut
}

// Record writes the cut.
func (p PowerCut) Record(r Recorder) {
	c := p.Cut
	record(r, history.FaultPowerCut, history.Value{Node: history.Ptr(p.Node), Cut: &c})
}

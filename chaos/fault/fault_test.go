package fault

import (
	"io"
	"slices"
	"testing"

	"github.com/raftlock/raftlock/checker/history"
)

// cluster is a fixed view: members 1..n, all up, leader l.
type cluster struct{ n, l int }

func (c cluster) Members() []int {
	ids := make([]int, c.n)
	for i := range ids {
		ids[i] = i + 1
	}
	return ids
}
func (c cluster) Up() []int   { return c.Members() }
func (c cluster) Leader() int { return c.l }

func TestPartitionShapesKeepWhatTheyName(t *testing.T) {
	c := cluster{n: 5, l: 2}
	seen := map[Shape]bool{}
	for seed := range uint64(200) {
		p := DrawPartition(NewRand(seed), c)
		seen[p.Shape] = true
		for _, l := range Links(c) {
			i, j := l[0], l[1]
			if p.Connected(i, j) != p.Connected(j, i) {
				t.Fatalf("%s %v: link %d-%d is cut one way only", p.Shape, p.Groups, i, j)
			}
			inOne := slices.ContainsFunc(p.Groups, func(g []int) bool { return slices.Contains(g, i) && slices.Contains(g, j) })
			if p.Shape != ShapeRing && p.Connected(i, j) != inOne {
				t.Fatalf("%s %v: %d-%d connected %v, in one group %v", p.Shape, p.Groups, i, j, p.Connected(i, j), inOne)
			}
		}
		if p.Shape == ShapeRing {
			for _, id := range c.Members() {
				reach := 0
				for _, o := range c.Members() {
					if o != id && p.Connected(id, o) {
						reach++
					}
				}
				if reach != 2 {
					t.Fatalf("ring %v: member %d reaches %d members, want its two neighbours", p.Groups, id, reach)
				}
			}
		}
		if p.Shape == ShapeLeader && !slices.Equal(p.Groups[0], []int{2}) {
			t.Fatalf("leader shape isolates %v, want the leader 2", p.Groups[0])
		}
	}
	for _, s := range []Shape{ShapeOne, ShapeLeader, ShapeHalves, ShapeRing, ShapeBridge} {
		if !seen[s] {
			t.Errorf("shape %s never drawn in 200 seeds", s)
		}
	}
}

func TestOneWayCutsOnlyItsLinks(t *testing.T) {
	c := cluster{n: 3, l: 1}
	for seed := range uint64(50) {
		o := DrawOneWay(NewRand(seed), c)
		if len(o.Links) == 0 {
			t.Fatalf("seed %d: no link cut", seed)
		}
		for _, l := range Links(c) {
			if o.Connected(l[0], l[1]) == slices.Contains(o.Links, l) {
				t.Fatalf("seed %d: link %v connected %v, cut %v", seed, l, o.Connected(l[0], l[1]), o.Links)
			}
		}
	}
}

func TestTargetsAreAMinorityOrAMajorityOfTheConfiguration(t *testing.T) {
	c := cluster{n: 5, l: 3}
	for seed := range uint64(100) {
		nodes := Targets(NewRand(seed), c)
		if len(nodes) == 0 || len(nodes) > 3 || !slices.IsSorted(nodes) {
			t.Fatalf("seed %d: targets %v, want 1 to 3 members in order", seed, nodes)
		}
	}
	if got := Targets(NewRand(1), emptyCluster{}); got != nil {
		t.Fatalf("targets with nobody up: %v", got)
	}
}

type emptyCluster struct{}

func (emptyCluster) Members() []int { return []int{1, 2, 3} }
func (emptyCluster) Up() []int      { return nil }
func (emptyCluster) Leader() int    { return 0 }

func TestRoundsDealEveryFamilyLeadFirst(t *testing.T) {
	fams := []Family{FamilyKill, FamilyPause, FamilySnapshot, FamilyClock}
	for seed := range uint64(20) {
		r := NewRounds(NewRand(seed), fams, FamilySnapshot)
		var got []Family
		for range 2 * len(fams) {
			got = append(got, r.Next())
		}
		if got[0] != FamilySnapshot {
			t.Fatalf("seed %d: first round starts with %s, want snapshot", seed, got[0])
		}
		for _, round := range [][]Family{got[:4], got[4:]} {
			s := slices.Clone(round)
			slices.Sort(s)
			want := slices.Clone(fams)
			slices.Sort(want)
			if !slices.Equal(s, want) {
				t.Fatalf("seed %d: round %v is not every family once", seed, round)
			}
		}
	}
}

func TestFaultsRecordTheHistoryEvents(t *testing.T) {
	r, _ := history.NewRecorder(io.Discard, nil)
	Kill{Nodes: []int{1}}.Record(r)
	Net{Links: [][2]int{{1, 2}}, Delay: 5e6, Loss: 0.1, Dup: 0.2}.Record(r)
	TrueClock(3).Record(r)
	Heal{}.Record(r)
	Garbage{Family: FamilyGarbageHeartbeat, Nodes: []int{2}, End: true}.Record(r)
	var fs []string
	for _, e := range r.Events() {
		if e.Process != history.Nemesis || e.Type != history.Info {
			t.Fatalf("event %+v is not a nemesis info", e)
		}
		fs = append(fs, e.F)
	}
	want := []string{history.FaultKill, history.FaultDelay, history.FaultLoss, history.FaultDuplicate, history.FaultClock, history.FaultHeal, history.FaultGarbageHeartbeatEnd}
	if !slices.Equal(fs, want) {
		t.Fatalf("recorded %v, want %v", fs, want)
	}
	if r.Events()[5].Value.Links != nil {
		t.Fatalf("a heal of every link names links %v", r.Events()[5].Value.Links)
	}
	if got := Join(Split("kill,pause")); got != "kill,pause" {
		t.Fatalf("Join(Split) = %q", got)
	}
}

func TestPowerDrawsOneMemberOrEveryMember(t *testing.T) {
	c := cluster{n: 5, l: 4}
	var leader, torn, whole int
	for seed := range uint64(300) {
		p := DrawPower(NewRand(seed), c, false)
		if len(p.Nodes) != 1 || len(p.Torn) != 1 || p.Nodes[0] < 1 || p.Nodes[0] > 5 {
			t.Fatalf("seed %d: power %+v, want one member of five with its cut's mode", seed, p)
		}
		if p.Nodes[0] == 4 {
			leader++
		}
		all := DrawPower(NewRand(seed), c, true)
		if !slices.Equal(all.Nodes, c.Members()) || len(all.Torn) != 5 {
			t.Fatalf("seed %d: power-all %+v, want every member, each with its cut's mode", seed, all)
		}
		for _, tr := range all.Torn {
			if tr {
				torn++
			} else {
				whole++
			}
		}
		if again := DrawPower(NewRand(seed), c, true); !slices.Equal(again.Torn, all.Torn) {
			t.Fatalf("seed %d: the same seed drew %v, then %v", seed, all.Torn, again.Torn)
		}
	}
	// One time in three the leader, else any of five: about 47 %.
	if leader < 100 || leader > 200 {
		t.Errorf("the leader was cut %d times in 300, want about 140", leader)
	}
	if torn == 0 || whole < torn {
		t.Errorf("cuts: %d torn, %d dropping every unsynced write; want about one in three torn", torn, whole)
	}
	if p := DrawPower(NewRand(1), emptyCluster{}, true); p.Nodes != nil {
		t.Fatalf("power with nobody up: %+v", p)
	}
}

func TestPowerRecordsAKillThenEachCut(t *testing.T) {
	r, _ := history.NewRecorder(io.Discard, nil)
	Power{Nodes: []int{1, 3}, Torn: []bool{false, true}}.Record(r)
	cut := history.PowerCut{Mode: "torn", Files: 2, BytesDropped: 8192, BytesKept: 4096, EntriesUndone: 1}
	PowerCut{Node: 3, Cut: cut}.Record(r)
	Start{Nodes: []int{1, 3}}.Record(r)
	ev := r.Events()
	if len(ev) != 3 || ev[0].F != history.FaultKill || ev[1].F != history.FaultPowerCut || ev[2].F != history.FaultStart {
		t.Fatalf("recorded %+v, want kill, power-cut, start", ev)
	}
	if !slices.Equal(ev[0].Value.Nodes, []int{1, 3}) {
		t.Fatalf("kill names %v, want [1 3]", ev[0].Value.Nodes)
	}
	if v := ev[1].Value; v.Node == nil || *v.Node != 3 || v.Cut == nil || *v.Cut != cut {
		t.Fatalf("power-cut value %+v, want node 3 and %+v", v, cut)
	}
}

package checker

import (
	"testing"

	"github.com/raftlock/raftlock/checker/history"
)

func nemesis(ms int64, f string, v history.Value) history.Event {
	return history.Event{Time: ms * 1e6, Process: history.Nemesis, Type: history.Info, F: f, Value: v}
}

func clockEvent(ms int64, node int, rate float64, offsetMS int64) history.Event {
	return nemesis(ms, "clock", history.Value{Node: &node, Rate: &rate, OffsetMS: &offsetMS})
}

// Overlapping faults of one family make one window that lasts until the
// last heals; every network family is shaded, one-way cuts included.
func TestPairWindowsFollowEveryFamily(t *testing.T) {
	events := []history.Event{
		nemesis(10, "kill", history.Value{Nodes: []int{1}}),
		nemesis(20, "kill", history.Value{Nodes: []int{2}}),
		nemesis(30, "start", history.Value{Nodes: []int{1}}),
		nemesis(40, "start", history.Value{Nodes: []int{2}}),
		nemesis(50, "partition", history.Value{Links: [][]int{{1, 2}}}),
		nemesis(55, "delay", history.Value{Links: [][]int{{2, 3}}, DelayMS: history.Ptr[int64](50)}),
		nemesis(56, "loss", history.Value{Links: [][]int{{3, 1}}, Loss: history.Ptr(0.2)}),
		nemesis(60, "heal", history.Value{}),
		clockEvent(70, 3, 2, 0),
		clockEvent(80, 3, 1, 0),
		nemesis(90, "pause", history.Value{Nodes: []int{3}}),
	}
	_, ws := Pair(events)
	want := []Window{{Kind: "kill", Start: 10e6, End: 40e6}, {Kind: "partition", Start: 50e6, End: 60e6},
		{Kind: "delay", Start: 55e6, End: 60e6}, {Kind: "loss", Start: 56e6, End: 60e6},
		{Kind: "clock", Start: 70e6, End: 80e6}, {Kind: "pause", Start: 90e6, End: 90e6}}
	if len(ws) != len(want) {
		t.Fatalf("windows %+v, want %+v", ws, want)
	}
	for i := range want {
		if ws[i].Kind != want[i].Kind || ws[i].Start != want[i].Start || ws[i].End != want[i].End {
			t.Errorf("window %d: %+v, want %+v", i, ws[i], want[i])
		}
	}
}

func TestClockModelBoundsEachMembersAdvance(t *testing.T) {
	events := []history.Event{
		nemesis(1000, "pause", history.Value{Nodes: []int{1}}),
		nemesis(2000, "resume", history.Value{Nodes: []int{1}}),
		clockEvent(3000, 2, 4, 0), // applied somewhere in (2000, 3000]
		clockEvent(5000, 2, 1, 0),
		clockEvent(6000, 3, 1, 700), // a jump somewhere in (5000, 6000]
		clockEvent(7000, 3, 0.5, -300),
		nemesis(8000, "kill", history.Value{Nodes: []int{3}}),
		nemesis(9000, "start", history.Value{Nodes: []int{3}}),
	}
	m := newClockModel(events)
	for _, tc := range []struct {
		a, b   int64 // ms
		wantMS float64
		faulty bool
	}{
		{0, 1500, 1500, false},          // before any clock fault: exact
		{500, 2000, 1500, false},        // still exact: the fault came after the resume
		{1500, 2500, 500 + 4*500, true}, // the lead-in runs at the faster rate
		{3000, 4000, 4000, true},        // inside the window
		{4500, 5500, 4*500 + 500, true}, // the window ends
		{5200, 6200, 1000 + 700, true},  // node 3's jump may fall inside
		{6500, 7500, 1000, false},       // slow and backward steps never help
		{9500, 10500, 1000, false},      // restarted members run normally
	} {
		got, faulty := m.maxAdvance(tc.a*1e6, tc.b*1e6)
		if got/1e6 != tc.wantMS || faulty != tc.faulty {
			t.Errorf("[%d, %d]ms: advance %.1fms (faulty %v), want %.1fms (%v)", tc.a, tc.b, got/1e6, faulty, tc.wantMS, tc.faulty)
		}
	}
}

func TestReportsShadeNewNemesisFamilies(t *testing.T) {
	events := readTestdata(t, "well-formed")
	v := Check(events, Options{})
	kinds := map[string]bool{}
	for _, w := range v.windows {
		kinds[w.Kind] = true
	}
	for _, k := range []string{"partition", "delay", "loss"} {
		if !kinds[k] {
			t.Errorf("no %s window in %+v", k, v.windows)
		}
	}
	if _, err := v.WriteReports(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

package clusterstatus

import (
	"slices"
	"testing"
)

func answered(id, leader, applied uint64, role string, voters ...uint64) Entry {
	term := uint64(1)
	return Entry{ID: id, Addr: "m", Role: role, Term: &term, Leader: &leader, Commit: &applied, Applied: &applied, voters: voters}
}

// report is what Gather makes of entries.
func report(entries ...Entry) *Report {
	r := &Report{Entries: entries}
	r.classify()
	return r
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		name        string
		r           *Report
		refused     bool
		wantErr     string
		wantVoters  []uint64
		wantMissing []uint64
	}{
		{"healthy", report(answered(1, 1, 5, "leader", 1, 2), answered(2, 1, 4, "follower", 1, 2)), false, "", []uint64{1, 2}, nil},
		{"no leader", report(answered(1, 0, 5, "follower", 1)), false, "no leader: no member asked knows one (the cluster cannot serve until a majority of its voters can elect one)", []uint64{1}, nil},
		{"unreachable", report(answered(1, 1, 5, "leader", 1, 2), Entry{ID: 2, Addr: "b", Role: RoleUnreachable}), false, "1 endpoint of 2 unreachable: b (member 2)", []uint64{1, 2}, nil},
		{"all refused", report(Entry{Addr: "a", Role: RoleRefused, Error: "permission denied"}), true, "permission denied", nil, nil},
		{"some refused", report(answered(1, 1, 5, "leader", 1, 3), Entry{Addr: "c", Role: RoleRefused, Error: "no"}), true, "refused by c: no", []uint64{1, 3}, []uint64{3}},
		{"none reachable", report(Entry{Addr: "a", Role: RoleUnreachable, Error: "dial"}), false, "no member reachable: a: dial", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused, err := tc.r.Verdict()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr || refused != tc.refused {
				t.Fatalf("Verdict() = %v, %q; want %v, %q", refused, got, tc.refused, tc.wantErr)
			}
			if !slices.Equal(tc.r.Voters, tc.wantVoters) {
				t.Fatalf("voters %v, want %v", tc.r.Voters, tc.wantVoters)
			}
			if m := notShown(tc.r.Entries, tc.r.Voters, tc.r.Learners); tc.r.Known && !slices.Equal(m, tc.wantMissing) {
				t.Fatalf("not shown %v, want %v", m, tc.wantMissing)
			}
		})
	}
}

func TestJoinIDs(t *testing.T) {
	if got := JoinIDs(nil); got != "none" {
		t.Fatalf("JoinIDs(nil) = %q", got)
	}
	if got := JoinIDs([]uint64{1, 2, 3}); got != "1 2 3" {
		t.Fatalf("JoinIDs = %q", got)
	}
}

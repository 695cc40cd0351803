package sim

import (
	crand "crypto/rand"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
)

// runWorld is Run, returning the simulated world for inspection.
func runWorld(t *testing.T, cfg Config) *sim {
	t.Helper()
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	saved := crand.Reader
	crand.Reader = seededReader{rand.New(rand.NewPCG(cfg.Seed, 0x72616e64))}
	defer func() { crand.Reader = saved }()
	s := newSim(cfg)
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMembershipFamilyReplacesMembers: the membership family removes
// members (the leader too, which applies its own removal when the aim
// hits), adds fresh ones that catch up by snapshot (a joiner restarted
// before it applied its own add among them) and promotes them; every run
// stays valid and ends with the configured number of voters, all of them
// up; the final checks cover the newcomers and leave the removed out.
func TestMembershipFamilyReplacesMembers(t *testing.T) {
	var total MembershipStats
	newcomerLed := false
	for seed := uint64(1); seed <= 8; seed++ {
		cfg := Config{Seed: seed, Duration: 8 * time.Second, Faults: []fault.Family{"membership"}}
		s := runWorld(t, cfg)
		res := &s.res
		v := Check(res, 30*time.Second)
		expectValid(t, seed, v)
		ms := res.Stats.MembershipStats
		if ms.MembersRemoved == 0 || ms.MembersAdded != ms.MembersRemoved || ms.MembersReplaced != ms.MembersAdded {
			t.Errorf("seed %d: %+v: want every removed member replaced by a promoted newcomer", seed, ms)
		}
		for _, c := range v.Checks {
			if c.Name == "newcomer-stuck" && c.Status != checker.StatusOK {
				t.Errorf("seed %d: newcomer-stuck is %s (%s), want ok", seed, c.Status, c.Note)
			}
		}
		if v.Stats.MembersReplaced != ms.MembersReplaced {
			t.Errorf("seed %d: the verdict counts %d members replaced, the run %d", seed, v.Stats.MembersReplaced, ms.MembersReplaced)
		}
		// The history names every change.
		count := map[string]int{}
		for _, e := range res.Events {
			if e.Process == history.Nemesis {
				count[e.F]++
			}
		}
		if count["member-remove"] != ms.MembersRemoved || count["member-removed"] != ms.MembersRemoved ||
			count["member-add"] != ms.MembersAdded || count["member-promote"] != ms.MembersReplaced {
			t.Errorf("seed %d: history has %v for %+v", seed, count, ms)
		}
		// The configuration is back to cfg.Nodes voters, every one up and
		// in the digests; no removed member is.
		l := s.leader()
		if l == nil {
			t.Fatalf("seed %d: no leader at the end", seed)
		}
		st, _ := s.status(l)
		if len(st.Voters) != s.cfg.Nodes || len(st.Learners) != 0 {
			t.Errorf("seed %d: voters %v learners %v at the end, want %d voters", seed, st.Voters, st.Learners, s.cfg.Nodes)
		}
		if l.id > uint64(s.cfg.Nodes) {
			newcomerLed = true
		}
		var digested []uint64
		for _, d := range res.Digests {
			digested = append(digested, uint64(d.Node))
		}
		for _, id := range st.Voters {
			if !slices.Contains(digested, id) || s.nodes[id-1].retired {
				t.Errorf("seed %d: voter %d: digested %v, retired %v", seed, id, digested, s.nodes[id-1].retired)
			}
		}
		for _, n := range s.nodes {
			if n.retired && slices.Contains(digested, n.id) {
				t.Errorf("seed %d: removed member %d is in the digests", seed, n.id)
			}
		}
		total.MembersRemoved += ms.MembersRemoved
		total.ReplacedBySnapshot += ms.ReplacedBySnapshot
		total.MembersReplaced += ms.MembersReplaced
		total.RemovedStopped += ms.RemovedStopped
		total.LeadersRemoved += ms.LeadersRemoved
		total.LeaderSelfRemoved += ms.LeaderSelfRemoved
		total.JoinerRestarts += ms.JoinerRestarts
		total.MembershipFailed += ms.MembershipFailed
	}
	t.Logf("%+v", total)
	switch {
	case total.ReplacedBySnapshot != total.MembersReplaced:
		t.Errorf("%d of %d newcomers caught up by snapshot, want all (members compact every 30 entries)", total.ReplacedBySnapshot, total.MembersReplaced)
	case total.RemovedStopped != total.MembersRemoved:
		t.Errorf("%d of %d removed members stopped by themselves", total.RemovedStopped, total.MembersRemoved)
	case total.LeadersRemoved == 0 || total.LeaderSelfRemoved == 0:
		t.Errorf("%d leaders removed, %d applied their own removal as leader: want both", total.LeadersRemoved, total.LeaderSelfRemoved)
	case total.JoinerRestarts == 0:
		t.Error("no joiner was restarted before it applied its own add")
	case total.MembershipFailed != 0:
		t.Errorf("%d membership changes given up", total.MembershipFailed)
	case !newcomerLed:
		t.Error("no newcomer led at the end of any run")
	}
}

// TestNoSnapshotOnAddIsCaught: with the planted no-snapshot-on-add a
// newcomer is sent a snapshot that predates its add and refuses it: the
// newcomer-stuck check fails. Without the membership family the bug is
// refused (TestBadConfigIsRefused).
func TestNoSnapshotOnAddIsCaught(t *testing.T) {
	res, err := Run(Config{Seed: 1, Duration: 5 * time.Second, Faults: []fault.Family{"membership"}, Bug: "no-snapshot-on-add"})
	if err != nil {
		t.Fatal(err)
	}
	v := Check(res, 30*time.Second)
	if got := FailingCheck(v); got != "newcomer-stuck" || v.ExitCode != 1 {
		t.Fatalf("first failing check %q (exit %d), want newcomer-stuck", got, v.ExitCode)
	}
	if res.Newcomers == nil || res.Newcomers.Added == 0 || len(res.Newcomers.Problems) == 0 {
		t.Fatalf("newcomers %+v: want members added and their refused snapshots", res.Newcomers)
	}
}

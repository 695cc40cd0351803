package chaos

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
)

// garbage is a default family; the family that stops a member without
// TLS is opt-in: --nemesis names it, the default never has it.
func TestGarbageHeartbeatIsOptIn(t *testing.T) {
	if !slices.Contains(Families, "garbage") {
		t.Error("garbage is not a default family")
	}
	for _, f := range OptInFamilies {
		if slices.Contains(Families, f) {
			t.Errorf("%s is in the default families", f)
		}
	}
	cfg := Config{Nodes: 3, Clients: 1, Keys: 1, Time: time.Second, LeaseMin: 10 * time.Millisecond, LeaseMax: time.Second,
		FaultInterval: time.Second, FaultDuration: time.Second, SnapshotEvery: 1, Nemeses: []fault.Family{"kill", "garbage", "garbage-heartbeat"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(garbageKinds, "forge-heartbeat") {
		t.Error("garbage draws the heartbeat known to stop a member without TLS")
	}
}

// No malformed client frame is a request a member could act on: garbage
// must never acquire or release a lock the history does not show.
func TestGarbageClientFramesAreNeverRequests(t *testing.T) {
	n := &Nemesis{}
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := bufio.NewReader(bytes.NewReader(malformedClientFrames(rng, n)))
		for {
			body, err := wire.ReadFrame(r)
			if err != nil {
				break
			}
			if _, err := wire.DecodeRequest(body); err == nil {
				t.Fatalf("seed %d: frame %x decodes as a request", seed, body)
			}
			if _, _, ok := wire.RequestHeader(body); ok {
				t.Fatalf("seed %d: frame %x has a request header", seed, body)
			}
		}
	}
}

// A forged snapshot must be one a member's checks refuse: never one a
// member would install (a valid configuration naming it and data that
// decodes), which would replace its state even with every check in place.
// forge-snap-conf's configuration never restores (and its data decodes,
// so only the configuration check refuses it); forge-snap-data's data
// never decodes (and its configuration restores, so only the data check
// refuses it).
func TestForgedSnapshotsAreNeverInstallable(t *testing.T) {
	n := &Nemesis{}
	restore := func(cs *raftpb.ConfState) error {
		_, _, err := confchange.Restore(confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: 1}, cs)
		return err
	}
	st := wire.Status{Voters: []uint64{1, 2, 3}}
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 1))
		id := 1 + rng.Uint64N(3)
		if cs := unrestorableConf(rng, id); restore(cs) == nil {
			t.Fatalf("seed %d: configuration %v restores", seed, cs)
		}
		if b := undecodableSnapshot(rng); func() error { _, _, _, err := member.DecodeSnapshot(b); return err }() == nil {
			t.Fatalf("seed %d: data %x decodes", seed, b)
		}
		if cs := n.restorableConf(st, id); restore(cs) != nil {
			t.Fatalf("seed %d: configuration %v does not restore", seed, cs)
		}
	}
	if cs := n.restorableConf(wire.Status{Voters: []uint64{1, 2}, Learners: []uint64{4}}, 4); restore(cs) != nil || !slices.Contains(cs.GetLearners(), 4) {
		t.Errorf("a learner target: configuration %v", cs)
	}
}

package sim

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/chaos/workload"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/member"
)

// Families are the fault families of --faults, in the order it documents
// them.
var Families = []fault.Family{fault.FamilyKill, fault.FamilyCrash, fault.FamilyPartition, fault.FamilyNet, fault.FamilyClock, fault.FamilyDisk, fault.FamilyPause, fault.FamilyMembership}

// Config is one simulated run. Seed, Duration, MaxOps, MaxFaults and Faults
// together decide everything that happens; the shrinker searches smaller
// values of the last four.
type Config struct {
	Seed     uint64
	Nodes    int            // 3 or 5
	Duration time.Duration  // simulated time the workload runs
	Faults   []fault.Family // enabled families (subset of Families)
	Bug      string         // planted bug: member.Config.Bug
	// MaxOps: once that many client operations were invoked, no client
	// starts another read or acquire cycle (a cycle under way finishes).
	// MaxFaults: the nemesis stops after that many faults. 0: no bound.
	// Shrinking lowers them.
	MaxOps    int
	MaxFaults int
	// SkipFaults lists faults (1 for the first) the nemesis does not
	// inject, keeping their turn in the schedule; shrinking sets it.
	SkipFaults []int
	Clients    int // default 6
	Keys       int // default 3
	// Tick is a member's raft tick on its own clock (default 10ms).
	Tick          time.Duration
	SnapshotEvery uint64 // default 30: snapshots meet crashes often
	SnapshotKeep  uint64 // default 5
	LeaseMin      time.Duration
	LeaseMax      time.Duration
	// FaultInterval is the mean quiet time between faults, FaultDuration
	// the mean length of one.
	FaultInterval time.Duration
	FaultDuration time.Duration
	// Held locks are taken before the workload, with leases of HeldLease
	// and keys of KeySize bytes that the workload never touches, so the
	// workload runs against a big table and snapshots are big (default 0,
	// key size 250). With Held > 0 members snapshot every SnapshotEvery
	// entries whatever the table's size (member.Config.SnapshotByEntries).
	Held    int
	KeySize int
	// MaxUncommitted is member.Config.MaxUncommitted. 0 draws it from the
	// seed (SeedMaxUncommitted), so a swarm covers the default bound, a
	// tighter one, looser ones and none: a bound of 2 or less commits an
	// old term's tail before a new leader decides anything, which hides
	// what the term barrier is for.
	MaxUncommitted int
	// Resource is what the locks guard (--resource): workload.Fenced (""
	// too, the default) or workload.Unfenced, a register that accepts
	// every token, so a holder that stalled past its lease overwrites.
	Resource workload.Resource
	// Trace receives trace.log; nil: no trace (the fast path of a swarm).
	Trace io.Writer
}

// HeldLease is the lease of the locks a run takes before its workload
// (Config.Held): long enough that none runs out in a run.
const HeldLease = time.Hour

// SeedMaxUncommitted is the bound on a leader's uncommitted entries a run
// of seed draws when Config.MaxUncommitted is 0: the default bound for
// two seeds in five, a tighter one, a looser one or none. It has its own
// stream, so that the draw changes no other choice.
func SeedMaxUncommitted(seed uint64) int {
	bounds := [...]int{member.DefaultMaxUncommitted, member.DefaultMaxUncommitted, 1, 4, -1}
	return bounds[rand.New(rand.NewPCG(seed, 0x706970)).IntN(len(bounds))]
}

// Defaults fills zero fields.
func (c *Config) Defaults() {
	orDefault(&c.Nodes, 3)
	orDefault(&c.Duration, 60*time.Second)
	orDefault(&c.Clients, 6)
	orDefault(&c.Keys, 3)
	orDefault(&c.Tick, 10*time.Millisecond)
	orDefault(&c.SnapshotEvery, 30)
	orDefault(&c.SnapshotKeep, 5)
	orDefault(&c.LeaseMin, 200*time.Millisecond)
	orDefault(&c.LeaseMax, time.Second)
	orDefault(&c.FaultInterval, time.Second)
	orDefault(&c.FaultDuration, 1500*time.Millisecond)
	orDefault(&c.KeySize, 250)
}

// orDefault sets *v to d if it is zero.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate checks a Config (after Defaults).
func (c *Config) Validate() error {
	switch {
	case c.Nodes != 3 && c.Nodes != 5:
		return errors.New("--nodes must be 3 or 5")
	case c.Duration <= 0:
		return errors.New("--duration must be positive")
	case c.Clients < 1 || c.Keys < 1:
		return errors.New("clients and keys must be at least 1")
	case c.MaxOps < 0 || c.MaxFaults < 0:
		return errors.New("--max-ops and --max-faults must not be negative")
	case slices.ContainsFunc(c.SkipFaults, func(i int) bool { return i < 1 }):
		return errors.New("--skip-faults counts faults from 1")
	case c.LeaseMin < 10*time.Millisecond || c.LeaseMax < c.LeaseMin:
		return errors.New("leases must satisfy 10ms <= lease-min <= lease-max")
	case c.Held < 0 || c.Held+c.Keys > member.DefaultMaxKeys:
		return fmt.Errorf("--held must be from 0 to %d", member.DefaultMaxKeys-c.Keys)
	case c.KeySize < minHeldKeySize || c.KeySize > wire.MaxKeyLen:
		return fmt.Errorf("--key-size must be from %d to %d bytes", minHeldKeySize, wire.MaxKeyLen)
	}
	if c.Resource != "" && !slices.Contains(workload.Resources, c.Resource) {
		return fmt.Errorf("unknown --resource %q (want fenced or unfenced)", c.Resource)
	}
	for _, f := range c.Faults {
		if !slices.Contains(Families, f) {
			return fmt.Errorf("unknown fault family %q (want some of %s)", f, fault.Join(Families))
		}
	}
	if c.Bug != "" && !slices.Contains(member.Bugs(), c.Bug) {
		return fmt.Errorf("unknown bug %q (want one of %s)", c.Bug, strings.Join(member.Bugs(), ", "))
	}
	if c.Bug == member.BugNoSnapshotOnAdd && !slices.Contains(c.Faults, fault.FamilyMembership) {
		// A run that cannot reach the bug would report it missed.
		return fmt.Errorf("bug %q needs membership changes: add membership to --faults", c.Bug)
	}
	if c.Bug == member.BugDamagedLogTrusted {
		// Its disk is a model of a log, not pebble's files: nothing to damage.
		return fmt.Errorf("bug %q needs a member's pebble files damaged, which the simulator's disk does not have: use raftlock chaos --nemesis corrupt", c.Bug)
	}
	if c.Bug == member.BugNoPeerInputChecks {
		// Its network delivers only what members sent: no forged frame.
		return fmt.Errorf("bug %q needs forged peer frames, which the simulator does not send: use raftlock chaos --nemesis garbage", c.Bug)
	}
	return nil
}

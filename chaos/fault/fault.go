// Package fault is the one fault vocabulary of raftlock's two harnesses:
// the real-process nemesis (chaos) and the simulator's (chaos/sim). It
// draws typed faults (Kill, Pause, Partition, OneWay, Clock, Net, Disk,
// Garbage, Power) from a seeded *rand.Rand and a small view of the cluster, and
// records them in the history; the harnesses only carry them out, each
// on its own processes, proxies and clocks.
//
// A draw takes its random numbers in a fixed order, so a seed's schedule
// is a pure function of the seed and of what the view answered.
package fault

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/checker/history"
)

// Family is a kind of fault a run may enable (--nemesis, --faults).
type Family string

// The families. chaos and the simulator each enable some of them; the
// strings are the flags' and the reports' words.
const (
	FamilyKill             Family = "kill"
	FamilyCrash            Family = "crash" // a kill that loses unsynced writes (the simulator's power loss)
	FamilyPause            Family = "pause"
	FamilyPartition        Family = "partition"
	FamilyClock            Family = "clock"
	FamilyNet              Family = "net"
	FamilyDisk             Family = "disk"
	FamilySnapshot         Family = "snapshot"
	FamilyGarbage          Family = "garbage"
	FamilyGarbageHeartbeat Family = "garbage-heartbeat"
	FamilyMembership       Family = "membership"
	// FamilyClientPause stops a workload client process (SIGSTOP) past
	// its lease: the fault that breaks lease-only locking.
	FamilyClientPause Family = "client-pause"
	// FamilyPower kills one member and cuts its disk's power: its writes
	// not yet synced are lost (real processes on a lazyfs mount; the
	// simulator's crash is its twin). FamilyPowerAll does it to every
	// member at once: the coordinated power failure of a rack or a room.
	FamilyPower    Family = "power"
	FamilyPowerAll Family = "power-all"
	// FamilyCorrupt stops one member, damages one of its data files (a
	// bit flipped or the file truncated: its log, a snapshot, or pebble's
	// metadata) and starts it again: it must recover or refuse its data,
	// never serve with less than it had.
	FamilyCorrupt Family = "corrupt"
)

// Split parses a comma-separated list of families, as the flags give it.
func Split(s string) []Family {
	var out []Family
	for _, f := range strings.Split(s, ",") {
		out = append(out, Family(f))
	}
	return out
}

// Join writes families as the flags take them: comma-separated.
func Join(fs []Family) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = string(f)
	}
	return strings.Join(parts, ",")
}

// NewRand is the nemesis's random stream for seed: both harnesses draw
// their faults from it.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6e656d65)) }

// Jitter draws a duration around d: from d/2 to 3d/2.
func Jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d)+1))
}

// Cluster is what a draw needs to know of the cluster.
type Cluster interface {
	// Members lists the members of the configuration, in id order.
	Members() []int
	// Up lists the members a fault on members may aim at, in id order.
	Up() []int
	// Leader is the member that leads, 0 when none is known.
	Leader() int
}

// Recorder appends an event to a history: *history.Recorder, or the
// simulator's.
type Recorder interface {
	Record(p history.Process, typ, f, key string, v history.Value) history.Event
}

// Fault is a drawn fault, or the event that undoes one, as the history
// records it.
type Fault interface {
	Record(r Recorder)
}

func record(r Recorder, f string, v history.Value) {
	r.Record(history.Nemesis, history.Info, f, "", v)
}

// Rounds deals families in rounds, each a seeded shuffle of every enabled
// family, so a run of a few rounds' length sees every one.
type Rounds struct {
	rng      *rand.Rand
	families []Family
	lead     Family
	round    []Family
	dealt    bool
}

// NewRounds deals families with rng. lead, when enabled, leads the first
// round ("" for none).
func NewRounds(rng *rand.Rand, families []Family, lead Family) *Rounds {
	return &Rounds{rng: rng, families: families, lead: lead}
}

// Next is the next family.
func (r *Rounds) Next() Family {
	if len(r.round) == 0 {
		first := !r.dealt
		r.dealt = true
		r.round = slices.Clone(r.families)
		r.rng.Shuffle(len(r.round), func(i, j int) { r.round[i], r.round[j] = r.round[j], r.round[i] })
		if i := slices.Index(r.round, r.lead); first && r.lead != "" && i > 0 {
			r.round[0], r.round[i] = r.round[i], r.round[0]
		}
	}
	f := r.round[0]
	r.round = r.round[1:]
	return f
}

// Pair draws, one time in four, two of the enabled combinable families to
// run at once in place of f (in combinable's order); else it returns f
// alone. Combinable families touch state of their own, so any two heal
// independently: they are injected in combinable's order and healed in
// the reverse. The snapshot family drives a partition and kills of its
// own and always runs alone.
func Pair(rng *rand.Rand, f Family, enabled, combinable []Family) []Family {
	var pair []Family
	for _, c := range combinable {
		if slices.Contains(enabled, c) {
			pair = append(pair, c)
		}
	}
	if len(pair) < 2 || rng.IntN(4) != 0 || f == FamilySnapshot {
		return []Family{f}
	}
	i := rng.IntN(len(pair))
	j := (i + 1 + rng.IntN(len(pair)-1)) % len(pair)
	return []Family{pair[min(i, j)], pair[max(i, j)]}
}

// Targets draws members that are up: one, the leader, a minority or a
// majority of the configuration, in id order; nil when none is up.
func Targets(rng *rand.Rand, c Cluster) []int {
	ids := c.Up()
	if len(ids) == 0 {
		return nil
	}
	size := len(c.Members())
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var out []int
	switch rng.IntN(4) {
	case 0:
		out = ids[:1]
	case 1:
		if l := c.Leader(); l != 0 {
			out = []int{l}
		} else {
			out = ids[:1]
		}
	case 2:
		out = ids[:min(len(ids), max(1, (size-1)/2))]
	default:
		out = ids[:min(len(ids), size/2+1)]
	}
	out = slices.Clone(out)
	slices.Sort(out)
	return out
}

// Links lists every directed link between the members, in order.
func Links(c Cluster) [][2]int {
	var out [][2]int
	ids := c.Members()
	for _, i := range ids {
		for _, j := range ids {
			if i != j {
				out = append(out, [2]int{i, j})
			}
		}
	}
	return out
}

// linkList is links as the history writes them.
func linkList(links [][2]int) [][]int {
	if links == nil {
		return nil
	}
	out := make([][]int, len(links))
	for i, l := range links {
		out[i] = []int{l[0], l[1]}
	}
	return out
}

package fault

import (
	"math/rand/v2"
	"slices"

	"github.com/raftlock/raftlock/checker/history"
)

// The kinds of data file the corrupt family damages.
const (
	DamageLog      = "log"      // a write-ahead log or an sstable: the raft log
	DamageSnapshot = "snapshot" // a snapshot file
	DamageMetadata = "metadata" // pebble's MANIFEST or OPTIONS
)

// DamageKinds are the kinds, in the order a draw falls back through them
// when a member has no file of the kind drawn.
var DamageKinds = []string{DamageLog, DamageSnapshot, DamageMetadata}

// tailBytes is how near its end half the flips in a log land: a disk's
// latest writes are the likeliest to be damaged, and a flip deep in a
// log that later records' snapshot references outlived only ever meets
// a missing snapshot file.
const tailBytes = 16 << 10

// Corrupt is one member stopped, one of its data files damaged, and the
// member started again. The file is chosen once the member is down (its
// files are known then): Kind, then File among that kind's files (for a
// log, with Newest the newest write-ahead log: the one pebble writes),
// Pos where in it, Bit the bit flipped; Truncate cuts the file at Pos
// instead; Tail puts a log's flip in its last tailBytes.
type Corrupt struct {
	Node     int
	Kind     string
	Newest   bool
	Truncate bool
	Tail     bool
	File     uint64
	Pos      float64
	Bit      int
}

// DrawCorrupt draws a corrupt fault on a member that is up: the leader
// one time in three, else any. The log half the time (a snapshot or the
// metadata a quarter each), and then two times in three the newest
// write-ahead log: older logs and sstables a member keeps hold little it
// still needs, so damage to them mostly tests nothing. A flip two times
// in three, else a truncation. Node 0: none is up.
func DrawCorrupt(rng *rand.Rand, c Cluster) Corrupt {
	ids := c.Up()
	if len(ids) == 0 {
		return Corrupt{}
	}
	id := ids[rng.IntN(len(ids))]
	if rng.IntN(3) == 0 {
		if l := c.Leader(); l != 0 && slices.Contains(ids, l) {
			id = l
		}
	}
	kind := DamageLog
	switch rng.IntN(4) {
	case 2:
		kind = DamageSnapshot
	case 3:
		kind = DamageMetadata
	}
	return Corrupt{Node: id, Kind: kind, Newest: rng.IntN(3) != 0, Truncate: rng.IntN(3) == 0,
		Tail: rng.IntN(2) == 0, File: rng.Uint64(), Pos: rng.Float64(), Bit: rng.IntN(8)}
}

// Offset is where in a file of size bytes the fault flips a bit, or cuts
// it (always inside the file: size must be positive).
func (c Corrupt) Offset(size int64, kind string) int64 {
	if c.Tail && !c.Truncate && kind == DamageLog && size > tailBytes {
		return size - 1 - int64(c.Pos*tailBytes)
	}
	return min(size-1, int64(c.Pos*float64(size)))
}

// Record writes the stop the fault begins with; the damage is recorded
// after it (Damaged), once it is done.
func (c Corrupt) Record(r Recorder) { Kill{Nodes: []int{c.Node}}.Record(r) }

// Damaged is what a corrupt fault did to one member's file (f corrupt),
// or, with an outcome, how the member came back (f corrupt-end).
type Damaged struct {
	Node   int
	Damage history.Damage
	End    bool
}

// Record writes the damage, or its end.
func (d Damaged) Record(r Recorder) {
	f := history.FaultCorrupt
	if d.End {
		f = history.FaultCorruptEnd
	}
	dm := d.Damage
	record(r, f, history.Value{Node: history.Ptr(d.Node), Damage: &dm})
}

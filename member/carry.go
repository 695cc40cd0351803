package member

import "go.etcd.io/raft/v3/raftpb"

// A Carrier does the parts of a Ready for its driver: the production
// node, the simulator and the tests each have one, and Ready.Start,
// Ready.Finish and Ready.Carry call it in the one order the core requires
// (documented on Ready). Only the write itself is left to the driver
// between Start and Finish, because drivers differ there: the node
// overlaps it with its loop, the simulator may make it slow.
type Carrier interface {
	// Journal records entries applied since the last Ready (the audit
	// journal). False postpones the Ready's compaction: a snapshot must
	// not cover entries a failed journal write missed, or a restart could
	// never replay them.
	Journal(applied []AppliedEntry) bool
	// Compact stores a snapshot of the table and drops the log before
	// it, now or on a goroutine of its own (see Compaction). An error
	// stops the Ready there.
	Compact(cp *Compaction) error
	// Send sends messages to their peers.
	Send(msgs []*raftpb.Message)
	// Answer hands answers to their callers.
	Answer(answers []Answer)
	// Advance tells the core the Ready was carried out (Core.Advance).
	Advance() error
}

// A Holder is a Carrier that may hold a Ready back once its compaction
// is stored, before anything of it is sent or written: the simulator's
// aimed faults crash a member at that point. A held Ready goes no
// further.
type Holder interface {
	Hold(rd Ready) bool
}

// A Publisher is a Carrier that takes lock events (Ready.Events): the
// node hands them to its watchers. It must not block: a driver's loop
// waits on nobody who watches.
type Publisher interface {
	Publish(events []Event)
}

// A SyncCarrier is a Carrier that writes in the driver's own step
// (Ready.Carry).
type SyncCarrier interface {
	Carrier
	// Save stores the Ready's hard state, entries and snapshot, synced
	// when Ready.Sync.
	Save(rd Ready) error
}

// Writes says whether rd has anything to store.
func (rd Ready) Writes() bool {
	return rd.HardState != nil || len(rd.Entries) > 0 || rd.Snapshot != nil
}

// Start carries rd out up to its write: the applied entries are
// journalled, their lock events published (Publisher; they are of
// entries applied already, so nothing of the write is promised), the compaction is stored (unless the journal failed), and a
// leader's appends go out (they need not wait for its own fsync). False
// means c held rd back (Holder) or failed (err); the driver then neither
// writes nor finishes it.
func (rd Ready) Start(c Carrier) (bool, error) {
	compact := true
	if len(rd.Applied) > 0 {
		compact = c.Journal(rd.Applied)
	}
	if p, ok := c.(Publisher); ok && len(rd.Events) > 0 {
		p.Publish(rd.Events)
	}
	if cp := rd.Compaction; cp != nil && compact {
		if err := c.Compact(cp); err != nil {
			return false, err
		}
	}
	if h, ok := c.(Holder); ok && h.Hold(rd) {
		return false, nil
	}
	c.Send(rd.SendBeforePersist)
	return true, nil
}

// Finish carries rd out once its write returned without error: the
// messages that promise what was stored go out, the answers are
// delivered, and the core advances. A driver whose write failed does not
// call it: nothing of rd may leave the member that a lost write could
// make untrue.
func (rd Ready) Finish(c Carrier) error {
	c.Send(rd.Messages)
	c.Answer(rd.Answers)
	return c.Advance()
}

// Carry carries rd out whole, its write done in between by c.Save.
func (rd Ready) Carry(c SyncCarrier) error {
	ok, err := rd.Start(c)
	if !ok {
		return err
	}
	if rd.Writes() {
		if err := c.Save(rd); err != nil {
			return err
		}
	}
	return rd.Finish(c)
}

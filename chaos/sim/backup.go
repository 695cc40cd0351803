package sim

import (
	"math/rand/v2"
	"time"

	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/member"
)

// The backup taker asks a member for a backup now and then while the
// workload runs, as raftlock snapshot save does, following redirects to the
// leader and retrying what is safe to retry.
// Its requests are not history operations; each backup it gets is kept in
// Result.Backups for the checker's backup-freshness check (a backup is
// never older than an answer the cluster gave before it was asked for).

// newBackupTaker makes the backup taker, with a random stream of its own so
// that the workload clients' choices do not depend on its.
func (s *sim) newBackupTaker() *client {
	return &client{s: s, idx: -1, rng: rand.New(rand.NewPCG(s.cfg.Seed^0x6261636b7570, 1)), proc: -1,
		pref: 1, lastArrival: map[uint64]int64{}, backups: true}
}

// nextBackup asks for a backup the member that answered the last one (as
// an operator's endpoint stays the same), then waits 50 to 150ms before the
// next, until the workload's time is over.
func (c *client) nextBackup() {
	s, r := c.s, c.r()
	if s.stopOps {
		return
	}
	invoked := s.sch.now
	o := &op{c: c, f: "backup", req: member.Request{Op: member.OpBackup}, deadline: invoked + int64(2*time.Second),
		next: c.pref}
	o.then = func(typ string, a member.Answer) {
		if typ == history.OK && a.Backup != nil {
			c.pref = o.by
			s.keepBackup(o.by, invoked, a.Backup)
		}
		s.sch.after(int64(50*time.Millisecond)+r.Int64N(int64(100*time.Millisecond)), c.nextBackup)
	}
	c.cur = o
	s.sch.at(o.deadline, func() { c.timeout(o) })
	c.try(o)
}

// keepBackup records a backup member id answered, with the locks its table
// holds on the workload's keys.
func (s *sim) keepBackup(id uint64, invoked int64, b *member.BackupTable) {
	kept := checker.Backup{Member: int(id), Invoked: invoked, Completed: s.sch.now, Index: b.Index,
		LastToken: b.Table.LastToken(), Locks: map[string]uint64{}}
	for _, k := range s.keys {
		if l, ok := b.Table.Get(k); ok {
			kept.Locks[k] = l.Token
		}
	}
	s.res.Backups = append(s.res.Backups, kept)
	if s.tr.on() {
		s.tr.printf("backup node=%d index=%d last_token=%d locks=%v", id, b.Index, kept.LastToken, kept.Locks)
	}
}

package member

import (
	"testing"
)

// Rule guarded: a backup is never older than an answer the cluster
// already gave (rule 9: it is a read of the whole table). Leader 1 is cut
// off; 2 and 3 elect a new leader, which grants and acknowledges key "b";
// 1 has not noticed yet and is asked for a backup. It must not answer
// before a quorum confirms it leads, which never comes: it answers
// Unavailable. With backup-without-read-index it answers at once with a
// table that lacks "b".
func TestDeposedLeaderBackupIsNeverOlderThanAnAnswer(t *testing.T) {
	for _, bug := range []string{"", BugBackupWithoutReadIndex} {
		t.Run("bug="+bug, func(t *testing.T) {
			c := newCluster(t, 3, func(cfg *Config) { cfg.Bug = bug })
			c.elect(1)
			c.check("acquire a on 1", c.call(1, acquire(1, "a")), "token 1")
			c.down[1] = true
			// Only 2 and 3 tick: 1's clock stands still, so it never
			// counts the election timeout after which it would step down
			// (CheckQuorum).
			var lead uint64
			for i := 0; lead == 0; i++ {
				if i == 500 {
					t.Fatal("neither 2 nor 3 became a ready leader")
				}
				c.tick(2, 3)
				for _, id := range []uint64{2, 3} {
					if _, self := c.cores[id].Leader(); self && c.cores[id].CanDecide() == nil {
						lead = id
					}
				}
			}
			c.check("acquire b on the new leader", c.call(lead, acquire(2, "b")), "token 2")
			if _, self := c.cores[1].Leader(); !self || c.cores[1].CanDecide() != nil {
				t.Fatal("member 1 stepped down; the test needs it to believe it still leads")
			}
			c.submit(1, Request{Handle: 3, Op: OpBackup})
			if bug != "" {
				b := c.answer(1, 3).Backup
				if b == nil || b.Table.LastToken() != 1 {
					t.Fatalf("with %s: answer %+v, want the stale table (last token 1) at once", bug, c.answer(1, 3))
				}
				return
			}
			if a, ok := c.answers[1][3]; ok {
				t.Fatalf("member 1 answered a backup without a quorum: %s", describeAnswer(OpBackup, a))
			}
			for i := 0; i < 3*10; i++ { // ElectionTicks defaults to 10
				if _, ok := c.answers[1][3]; ok {
					break
				}
				c.tick(1)
			}
			c.check("backup on the deposed leader", describeAnswer(OpBackup, c.answer(1, 3)), "Unavailable")
			// Healed: the cluster's backup holds both locks.
			delete(c.down, 1)
			c.check("backup on the leader", c.call(lead, Request{Handle: 4, Op: OpBackup}), "backup: 2 locks, last token 2")
		})
	}
}

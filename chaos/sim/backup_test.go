package sim

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/member"
)

// TestBackupWithoutReadIndexIsCaught: seed 7 isolates a leader unaware of
// its successor (leaderfault.go); with the planted bug it answers the
// backup taker from its old table, and backup-freshness fails the run.
// The same seed without the bug is valid, with backups taken throughout.
func TestBackupWithoutReadIndexIsCaught(t *testing.T) {
	cfg := Config{Seed: 7, Duration: 10 * time.Second, Faults: Families}
	caughtWithBug(t, cfg, member.BugBackupWithoutReadIndex, "backup-freshness", func(bug string, res *Result) {
		if res.Stats.UnawareLeaders == 0 || len(res.Backups) < 20 {
			t.Errorf("bug %q: %d leaders isolated unaware, %d backups; the test needs both", bug, res.Stats.UnawareLeaders, len(res.Backups))
		}
	})
}

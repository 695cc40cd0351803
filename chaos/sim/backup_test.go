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
	for _, bug := range []string{"", member.BugBackupWithoutReadIndex} {
		cfg.Bug = bug
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		v := Check(res, 30*time.Second)
		want := ""
		if bug != "" {
			want = "backup-freshness"
		}
		if got := FailingCheck(v); got != want {
			t.Errorf("bug %q: first failing check %q, want %q", bug, got, want)
		}
		if res.Stats.UnawareLeaders == 0 || len(res.Backups) < 20 {
			t.Errorf("bug %q: %d leaders isolated unaware, %d backups; the test needs both", bug, res.Stats.UnawareLeaders, len(res.Backups))
		}
	}
}

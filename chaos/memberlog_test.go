package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker"
)

// The counts include the repeats a member held back and reported on a
// later line for the same reason.
func TestMemberLogCountsAddHeldRepeats(t *testing.T) {
	dir := t.TempDir()
	log := `level=WARN msg="closed peer connection" remote=127.0.0.1:5 reason="bad hello" same_reason_since_last_line=0
level=WARN msg="closed peer connection" remote=127.0.0.1:6 reason="bad hello" same_reason_since_last_line=41
level=WARN msg="closing client connection" reason="frame too large"
`
	if err := os.WriteFile(filepath.Join(dir, "node-1.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := MemberLogCounts(dir)
	if got["peer_conns_closed"] != 43 || got["client_conns_closed"] != 1 {
		t.Fatalf("counts %v, want 43 peer connections closed and 1 client connection", got)
	}
}

// A member that refused its leader's heartbeat for committing past its
// stored log is named once, with its first such line and the count; a
// member that logged other refusals is not.
func TestLostAcknowledgedNamesMembersThatRefusedAHeartbeatPastTheirLog(t *testing.T) {
	dir := t.TempDir()
	logs := map[string]string{
		"node-1.log": `level=WARN msg="dropped raft message" member=1 type=MsgApp from=9 err="raft: cannot step as peer not found"
`,
		"node-2.log": `level=INFO msg="started"
level=ERROR msg="refused raft message" member=2 type=MsgHeartbeat from=3 err="commit index beyond the stored log: heartbeat from 3 commits 483, log ends at 406"
level=ERROR msg="refused raft message" member=2 type=MsgHeartbeat from=3 err="commit index beyond the stored log: heartbeat from 3 commits 490, log ends at 406"
`,
	}
	for name, l := range logs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(l), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := LostAcknowledged(dir)
	if len(got) != 1 || got[0].Node != 2 || !strings.Contains(got[0].Reason, "commits 483, log ends at 406") ||
		!strings.Contains(got[0].Err, "refused 2 heartbeat(s)") {
		t.Fatalf("LostAcknowledged = %+v, want member 2 alone, its first line and 2 refusals", got)
	}
	v := Check(&Result{Crashes: got}, time.Second)
	for _, c := range v.Checks {
		if c.Name == "member-crashes" && (c.Status != checker.StatusViolation || len(c.Violations) != 1 ||
			!strings.Contains(c.Violations[0].Message, "node 2 (lost entries it had acknowledged")) {
			t.Fatalf("member-crashes %s %+v, want one violation naming node 2's lost entries", c.Status, c.Violations)
		}
	}
	if lossInjected([]fault.Family{fault.FamilyPower, fault.FamilyPowerAll, fault.FamilyKill}) {
		t.Fatal("the power families inject no loss of acknowledged entries")
	}
	if !lossInjected([]fault.Family{fault.FamilyPower, fault.FamilyGarbageHeartbeat}) {
		t.Fatal("garbage-heartbeat forges heartbeats past the log")
	}
}

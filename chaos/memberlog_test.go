package chaos

import (
	"os"
	"path/filepath"
	"testing"
)

// A member that exits with an error rather than a panic (one that cannot
// restart from what it stored) is named with the command's error line; a
// panic, when there is one, wins.
func TestCrashReasonReadsTheExitLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ log, want string }{
		{"level=INFO msg=started\nraftlock node: member 2 stopped: install snapshot at 120: checksum mismatch\n", "raftlock node: member 2 stopped: install snapshot at 120: checksum mismatch"},
		{"panic: entry 1 conflict with committed entry\ngoroutine 1 [running]:\nraftlock node: member 2 stopped\n", "panic: entry 1 conflict with committed entry"},
		{"level=INFO msg=started\n", ""},
	} {
		p := filepath.Join(dir, "node.log")
		if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := crashReason(p); got != tc.want {
			t.Errorf("crashReason(%q) = %q, want %q", tc.log, got, tc.want)
		}
	}
}

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

package procgroup

import (
	"os"
	"path/filepath"
	"testing"
)

// A member that exits with an error rather than a panic (one that cannot
// restart from what it stored) is named with the command's error line; a
// panic, when there is one, wins.
func TestExitReasonReadsTheExitLine(t *testing.T) {
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
		if got := ExitReason(p); got != tc.want {
			t.Errorf("ExitReason(%q) = %q, want %q", tc.log, got, tc.want)
		}
	}
}

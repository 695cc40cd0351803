package chaos

import (
	"os"
	"path/filepath"
	"testing"
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

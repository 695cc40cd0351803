package chaos

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// What the harness reads in the members' logs (node-N.log): what one that
// exited died of, and the lines by which they refused the garbage.

// heldRepeats reads how many repeats of a reason a log line reports.
var heldRepeats = regexp.MustCompile(`same_reason_since_last_line=(\d+)`)

// MemberLogCounts counts, over the members' logs in dir, the lines by
// which a member says it refused or closed a connection or message: how
// the garbage was isolated. A member logs a repeated reason for closing a
// peer connection once per window and reports the repeats on its next line
// for it (same_reason_since_last_line): those are counted, the repeats
// after a reason's last line are not.
func MemberLogCounts(dir string) map[string]int {
	lines := map[string]string{
		"closed peer connection":    "peer_conns_closed",
		"dropped raft message":      "raft_messages_dropped",
		"closing client connection": "client_conns_closed",
	}
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "node-*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			for sub, key := range lines {
				if strings.Contains(l, sub) {
					out[key]++
					if m := heldRepeats.FindStringSubmatch(l); m != nil {
						n, _ := strconv.Atoi(m[1])
						out[key] += n
					}
				}
			}
		}
	}
	return out
}

package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/member"
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

// LostAcknowledged reads the members' logs in dir for the line by which a
// member refuses a heartbeat that commits past its stored log
// (member.ErrCommitBeyondLog) and returns one account per member that
// logged it, with its first such line. A leader commits in a member's
// heartbeat no more than the member acknowledged, and a member
// acknowledges only what it stored (synced): unless the heartbeat was
// forged (the garbage-heartbeat family) or the member's disk was damaged
// on purpose, the member lost entries it had acknowledged. The simulator
// reports the same refusal as a member-crashes violation; raft itself
// would panic.
func LostAcknowledged(dir string) []Crash {
	var out []Crash
	files, _ := filepath.Glob(filepath.Join(dir, "node-*.log"))
	for _, f := range files {
		id, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "node-"), ".log"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, first := 0, ""
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, member.ErrCommitBeyondLog.Error()) {
				if n == 0 {
					first = l
				}
				n++
			}
		}
		if n > 0 {
			out = append(out, Crash{Node: id, Log: f,
				Err:    fmt.Sprintf("lost entries it had acknowledged: refused %d heartbeat(s) committing past its stored log", n),
				Reason: strings.TrimSpace(first)})
		}
	}
	slices.SortFunc(out, func(a, b Crash) int { return a.Node - b.Node })
	return out
}

// lossInjected says whether one of families makes a member refuse a
// heartbeat committing past its log on purpose: garbage-heartbeat forges
// such heartbeats, and corrupt damages a member's data, which may cost it
// entries it acknowledged (that family's own check judges what the member
// then does). LostAcknowledged proves a lost acknowledgement only without
// them.
func lossInjected(families []fault.Family) bool {
	return slices.ContainsFunc(families, func(f fault.Family) bool {
		return f == fault.FamilyGarbageHeartbeat || f == fault.FamilyCorrupt
	})
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/syncio"
	"github.com/raftlock/raftlock/node/nodetest"
)

// raftlock watch --json prints one JSON object per event with the HTTP
// API's fields, and ends with a one-line error and exit 1 when its member
// stops.
func TestWatchPrintsEventsAndEndsWhenCutOff(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	leader := c.WaitLeader()
	watched := c.Followers(leader)[0].ID()
	out, errb := syncio.NewBuffer(), syncio.NewBuffer()
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"watch", "jobs/", "--json", "--endpoints", c.Clients[watched]}, out, errb)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The watch starts from now: acquire until its events show.
	i := 0
	nodetest.WaitFor(t, 10*time.Second, "the watch to print an event", func() bool {
		if _, err := leader.AcquireAs(ctx, fmt.Sprintf("jobs/%d", i), "ci", time.Minute, 0, 0); err != nil {
			t.Fatal(err)
		}
		leader.Acquire(ctx, fmt.Sprintf("other/%d", i), time.Minute, 0, 0)
		i++
		return strings.Contains(out.String(), "\n")
	})
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q is no JSON object: %v", line, err)
		}
		keys := make([]string, 0, len(ev))
		for k := range ev {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if fmt.Sprint(keys) != "[index key lease_ms owner token type]" || ev["type"] != "granted" ||
			!strings.HasPrefix(ev["key"].(string), "jobs/") || ev["owner"] != "ci" || ev["lease_ms"] != float64(60000) {
			t.Fatalf("event %q", line)
		}
	}
	c.StopMember(watched)
	select {
	case got := <-code:
		msg := strings.TrimSpace(errb.String())
		if got != exitError || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "watch ended") {
			t.Fatalf("watch of a stopped member: exit %d, stderr %q", got, msg)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watch did not end when its member stopped")
	}
}

// raftlock watch takes exactly one PREFIX.
func TestWatchUsage(t *testing.T) {
	if code, _, _ := cli(t, "watch"); code != exitUsage {
		t.Fatalf("watch without a prefix: exit %d, want %d", code, exitUsage)
	}
	if code, _, errOut := cli(t, "watch", "--help"); code != 0 || !strings.Contains(errOut, "usage: raftlock watch PREFIX") {
		t.Fatalf("watch --help: exit %d %q", code, errOut)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/client"
)

// acquire --owner, get and list show the owner; list pages by --after;
// release --force frees a lock whatever its token (exit 4 when nobody
// holds it, 2 with --token as well); the README's forms of each.
func TestOwnerListAndForceFromTheCLI(t *testing.T) {
	eps := startCluster(t)
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, errOut := cli(t, append(args, "--endpoints", eps)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	mustRun("acquire", "jobs/nightly", "--lease", "5m", "--owner", "batch-7")
	mustRun("acquire", "jobs/hourly", "--lease", "5m")
	mustRun("acquire", "web/cache", "--lease", "5m", "--owner", "")
	if out := mustRun("get", "jobs/nightly"); !strings.HasPrefix(out, "jobs/nightly is held by batch-7: token 1,") {
		t.Fatalf("get: %q", out)
	}
	var got struct {
		Owner string `json:"owner"`
	}
	json.Unmarshal([]byte(mustRun("get", "jobs/hourly", "--json")), &got)
	if !strings.Contains(got.Owner, ":") { // HOSTNAME:PID by default
		t.Fatalf("default owner %q, want HOSTNAME:PID", got.Owner)
	}
	var p1, p2 client.LockPage
	json.Unmarshal([]byte(mustRun("list", "jobs/", "--limit", "1", "--json")), &p1)
	if len(p1.Locks) != 1 || p1.Locks[0].Key != "jobs/hourly" || !p1.More || p1.Locks[0].RemainingMS == 0 {
		t.Fatalf("first page: %+v", p1)
	}
	json.Unmarshal([]byte(mustRun("list", "jobs/", "--limit", "1", "--after", "jobs/hourly", "--json")), &p2)
	if len(p2.Locks) != 1 || p2.Locks[0].Key != "jobs/nightly" || p2.Locks[0].Owner != "batch-7" || p2.More {
		t.Fatalf("second page: %+v", p2)
	}
	lines := strings.Split(strings.TrimSpace(mustRun("list")), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "KEY TOKEN OWNER REMAINING" ||
		strings.Join(strings.Fields(lines[3])[:3], " ") != "web/cache 3 -" {
		t.Fatalf("list as a table:\n%s", strings.Join(lines, "\n"))
	}
	if out := mustRun("list", "--limit", "2"); !strings.Contains(out, "more: raftlock list --after jobs/nightly --limit 2") {
		t.Fatalf("a cut list does not say how to go on:\n%s", out)
	}
	if out := mustRun("release", "jobs/nightly", "--force"); out != "released jobs/nightly (token 1), forced\n" {
		t.Fatalf("release --force: %q", out)
	}
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"release", "jobs/nightly", "--force"}, 4, "jobs/nightly is not held"},
		{[]string{"release", "jobs/hourly", "--force", "--token", "2"}, 2, "give --token or --force"},
		{[]string{"list", "--limit", "0"}, 2, "--limit must be 1..1000"},
		{[]string{"acquire", "x", "--owner", strings.Repeat("o", 129)}, 2, "owner must be at most 128 bytes"},
	} {
		code, _, errOut := cli(t, append(c.args, "--endpoints", eps)...)
		if code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errOut, c.code, c.err)
		}
	}
	if out := mustRun("list", "nothing/"); out != fmt.Sprintf("no locks held under %q\n", "nothing/") {
		t.Fatalf("an empty list: %q", out)
	}
	if out := mustRun("list", "nothing/", "--json"); !strings.Contains(out, `"locks":[]`) {
		t.Fatalf("an empty list's JSON has no empty locks array: %q", out)
	}
}

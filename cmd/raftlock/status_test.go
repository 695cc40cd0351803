package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node/nodetest"
)

// status counts what it asked: a stopped member it asked is unreachable,
// named by its id, never also "not asked"; only a member no endpoint
// stands for is. And it exits as etcdctl endpoint health does: 1 when a
// member asked is unreachable or no member knows a leader.
func TestStatusAccountsForTheMembersItAsked(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	leader := c.WaitLeader()
	eps := strings.Join(c.Endpoints(), ",")
	if code, out, stderr := cli(t, "status", "--endpoints", eps); code != 0 || strings.Contains(out, "not asked") {
		t.Fatalf("status of a healthy cluster: exit %d, stderr %q\n%s", code, stderr, out)
	}
	followers := c.Followers(leader)
	asked := c.Clients[leader.ID()] + "," + c.Clients[followers[0].ID()]
	notAsked := followers[1].ID()
	code, out, stderr := cli(t, "status", "--endpoints", asked)
	if want := fmt.Sprintf("not asked: member %d (", notAsked); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("status of two members: exit %d, stderr %q; want exit 0 and %q\n%s", code, stderr, want, out)
	}

	stopped := followers[1].ID()
	c.StopMember(stopped)
	addr := c.Clients[stopped]
	code, out, stderr = cli(t, "status", "--endpoints", eps)
	if code != exitError || strings.Contains(out, "not asked") ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^%d +%s +unreachable `, stopped, regexp.QuoteMeta(addr))).MatchString(out) ||
		stderr != fmt.Sprintf("raftlock status: 1 endpoint of 3 unreachable: %s (member %d)\n", addr, stopped) {
		t.Fatalf("status with member %d stopped: exit %d, stderr %q\n%s", stopped, code, stderr, out)
	}
	code, out, _ = cli(t, "status", "--json", "--endpoints", eps)
	var st struct {
		Nodes []struct {
			ID   uint64 `json:"id"`
			Addr string `json:"addr"`
			Role string `json:"role"`
		} `json:"nodes"`
		NotAsked []uint64 `json:"not_asked"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != exitError || st.NotAsked != nil {
		t.Fatalf("status --json with member %d stopped: exit %d, %q (%v)", stopped, code, out, err)
	}
	for _, n := range st.Nodes {
		if n.Addr == addr && (n.ID != stopped || n.Role != "unreachable") {
			t.Fatalf("status --json: the stopped member is %+v", n)
		}
	}

	// With a majority gone, the last member knows no leader (once its
	// election timeout passes): exit 1 though every member asked answered.
	c.StopMember(followers[0].ID())
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, stderr = cli(t, "status", "--endpoints", c.Clients[leader.ID()])
		if strings.Contains(stderr, "no leader") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last member still knows a leader: exit %d, stderr %q\n%s", code, stderr, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != exitError {
		t.Fatalf("status with no leader: exit %d, want %d", code, exitError)
	}
}

// status --help documents its exit status.
func TestStatusHelpStatesItsExitStatus(t *testing.T) {
	code, _, help := cli(t, "status", "--help")
	for _, want := range []string{"1 when a member asked is unreachable", "or none knows a leader", "6 when the cluster's ACL refuses"} {
		if code != 0 || !strings.Contains(help, want) {
			t.Errorf("status --help lacks %q:\n%s", want, help)
		}
	}
}

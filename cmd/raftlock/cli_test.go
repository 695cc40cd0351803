package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/syncio"
	"github.com/raftlock/raftlock/node/nodetest"
)

func startCluster(t *testing.T) string {
	t.Helper()
	c, err := nodetest.Start(t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	return strings.Join(c.Endpoints(), ",")
}

func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	out, errb := syncio.NewBuffer(), syncio.NewBuffer()
	code := run(args, out, errb)
	return code, out.String(), errb.String()
}

func TestAcquireGetReleaseExitCodes(t *testing.T) {
	eps := startCluster(t)
	code, out, errOut := cli(t, "acquire", "k", "--lease", "30s", "--json", "--endpoints", eps)
	if code != 0 {
		t.Fatalf("acquire: exit %d: %s", code, errOut)
	}
	var got struct {
		Key     string `json:"key"`
		Token   uint64 `json:"token"`
		LeaseMS uint64 `json:"lease_ms"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Key != "k" || got.Token == 0 || got.LeaseMS != 30000 {
		t.Fatalf("acquire JSON %q: %+v %v", out, got, err)
	}
	if code, _, _ := cli(t, "acquire", "k", "--endpoints", eps); code != exitHeld {
		t.Fatalf("acquire of a held key: exit %d, want %d", code, exitHeld)
	}
	code, out, _ = cli(t, "get", "k", "--json", "--endpoints", eps)
	var info map[string]any
	if json.Unmarshal([]byte(out), &info); code != 0 || info["held"] != true || info["remaining_ms"] == nil {
		t.Fatalf("get: exit %d, %q", code, out)
	}
	if code, _, _ := cli(t, "release", "k", "--token", "999", "--endpoints", eps); code != exitNotOwner {
		t.Fatalf("release with a wrong token: exit %d, want %d", code, exitNotOwner)
	}
	if code, _, _ := cli(t, "renew", "k", "--token", "999", "--endpoints", eps); code != exitNotOwner {
		t.Fatalf("renew with a wrong token: exit %d, want %d", code, exitNotOwner)
	}
	tok := strings.TrimSpace(strings.Split(strings.Split(out, `"token":`)[1], ",")[0])
	tok = strings.TrimSuffix(tok, "}")
	if code, _, e := cli(t, "renew", "k", "--token", tok, "--lease", "5s", "--endpoints", eps); code != 0 {
		t.Fatalf("renew: exit %d %s", code, e)
	}
	if code, _, e := cli(t, "release", "k", "--token", tok, "--endpoints", eps); code != 0 {
		t.Fatalf("release: exit %d %s", code, e)
	}
	if code, _, _ := cli(t, "acquire", "", "--endpoints", eps); code != exitError {
		t.Fatalf("empty key: exit %d, want 1", code)
	}
	if code, _, _ := cli(t, "acquire", "k", "--lease", "2h", "--endpoints", eps); code != exitUsage {
		t.Fatalf("lease out of range: exit %d, want 2 (a bad flag value, as one that does not parse)", code)
	}
	if code, _, _ := cli(t, "acquire"); code != exitUsage {
		t.Fatalf("no key: exit %d, want 2", code)
	}
	if code, _, _ := cli(t, "nosuchcommand"); code != exitUsage {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
}

func TestStatusJSON(t *testing.T) {
	eps := startCluster(t)
	code, out, errOut := cli(t, "status", "--json", "--endpoints", eps+",127.0.0.1:1")
	if code != exitError || !strings.Contains(errOut, "unreachable: 127.0.0.1:1") {
		t.Fatalf("status with an unreachable endpoint: exit %d %s; want 1 naming it", code, errOut)
	}
	var st struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Nodes) != 4 {
		t.Fatalf("status JSON %q: %v", out, err)
	}
	leaders := 0
	for _, n := range st.Nodes[:3] {
		for _, f := range []string{"id", "addr", "role", "term", "leader", "commit", "applied"} {
			if _, ok := n[f]; !ok {
				t.Fatalf("status entry %v lacks %q", n, f)
			}
		}
		if n["role"] == "leader" {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders in %q", leaders, out)
	}
	if st.Nodes[3]["role"] != "unreachable" || st.Nodes[3]["term"] != nil {
		t.Fatalf("unreachable entry: %v", st.Nodes[3])
	}
}

func TestExecPassesTokenReturnsStatusAndReleases(t *testing.T) {
	eps := startCluster(t)
	file := filepath.Join(t.TempDir(), "token")
	// Leases of 1 s (renewed about every 330 ms), not shorter: under the
	// race detector on a busy machine a renewal can take a few hundred ms.
	code, _, errOut := cli(t, "exec", "job", "--lease", "1s", "--endpoints", eps, "--",
		"sh", "-c", `echo "$RAFTLOCK_TOKEN" > `+file+`; sleep 3.2; exit 7`)
	if code != 7 {
		t.Fatalf("exec: exit %d, want the command's 7 (%s)", code, errOut)
	}
	b, err := os.ReadFile(file)
	if err != nil || strings.TrimSpace(string(b)) == "" || strings.TrimSpace(string(b)) == "0" {
		t.Fatalf("RAFTLOCK_TOKEN not passed: %q %v", b, err)
	}
	// The command outlived three leases: renewal kept it; exec released it after.
	code, out, _ := cli(t, "get", "job", "--json", "--endpoints", eps)
	if code != 0 || !strings.Contains(out, `"held":false`) {
		t.Fatalf("after exec: exit %d %q, want free", code, out)
	}
	if code, _, _ := cli(t, "exec", "job", "--endpoints", eps, "--", "true"); code != 0 {
		t.Fatalf("exec true: exit %d", code)
	}
}

// exec stops its command and says so when the lock is lost (here: released
// behind its back with the token exec handed to the command).
func TestExecStopsCommandWhenLockLost(t *testing.T) {
	eps := startCluster(t)
	dir := t.TempDir()
	tokenFile, done := filepath.Join(dir, "token"), filepath.Join(dir, "done")
	result := make(chan [3]any, 1)
	go func() {
		code, out, errOut := cli(t, "exec", "job", "--lease", "300ms", "--endpoints", eps, "--",
			"sh", "-c", `echo "$RAFTLOCK_TOKEN" > `+tokenFile+`; sleep 20; touch `+done)
		result <- [3]any{code, out, errOut}
	}()
	var tok string
	deadline := time.Now().Add(10 * time.Second)
	for tok == "" && time.Now().Before(deadline) {
		if b, err := os.ReadFile(tokenFile); err == nil {
			tok = strings.TrimSpace(string(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if tok == "" {
		t.Fatal("the command never started")
	}
	if code, _, e := cli(t, "release", "job", "--token", tok, "--endpoints", eps); code != 0 {
		t.Fatalf("release behind exec's back: exit %d %s", code, e)
	}
	select {
	case r := <-result:
		if r[0].(int) != exitError || !strings.Contains(r[2].(string), "lost the lock") {
			t.Fatalf("exec after losing the lock: exit %v, stderr %q", r[0], r[2])
		}
	case <-time.After(15 * time.Second):
		t.Fatal("exec did not stop its command after losing the lock")
	}
	if _, err := os.Stat(done); err == nil {
		t.Fatal("the command ran to completion")
	}
}

// Errors where nothing happened read as such, at once: a malformed
// endpoint is a usage error, a cluster with every member down answers
// "no member reachable" without waiting out the timeout, and a lease out
// of range is a usage error naming the value given.
func TestNothingHappenedErrorsAreImmediateAndPlain(t *testing.T) {
	if code, _, errOut := cli(t, "get", "k", "--endpoints", "nonsense"); code != exitUsage || !strings.Contains(errOut, "nonsense") {
		t.Fatalf("--endpoints nonsense: exit %d (%q), want %d", code, errOut, exitUsage)
	}
	var down []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		down = append(down, ln.Addr().String())
		ln.Close() // nobody listens there now: connections are refused
	}
	start := time.Now()
	code, _, errOut := cli(t, "acquire", "k", "--endpoints", strings.Join(down, ","))
	if code != exitError || !strings.Contains(errOut, "no member reachable at") {
		t.Fatalf("every member down: exit %d (%q), want 1 and 'no member reachable'", code, errOut)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("every member down: took %v, want an immediate answer", took)
	}
	for lease, want := range map[string]string{"-5s": "--lease -5s: a duration must not be negative", "2h": "--lease 2h: must be 10ms..1h"} {
		if code, _, errOut := cli(t, "acquire", "k", "--lease", lease, "--endpoints", strings.Join(down, ",")); code != exitUsage || !strings.Contains(errOut, want) {
			t.Fatalf("--lease %s: exit %d (%q), want %d and %q", lease, code, errOut, exitUsage, want)
		}
	}
}

// exec exits as a shell would: 127 when the command is not found (without
// taking the lock), 128+n when it dies by signal n; and it has no --json.
func TestExecExitCodesAsAShell(t *testing.T) {
	eps := startCluster(t)
	if code, _, errOut := cli(t, "exec", "job", "--endpoints", eps, "--", "no-such-command-raftlock"); code != exitNotFound {
		t.Fatalf("a missing command: exit %d (%s), want 127", code, errOut)
	}
	if code, out, _ := cli(t, "get", "job", "--json", "--endpoints", eps); code != 0 || !strings.Contains(out, `"held":false`) {
		t.Fatalf("a missing command took the lock: %q", out)
	}
	if code, _, errOut := cli(t, "exec", "job", "--endpoints", eps, "--", "sh", "-c", "kill -TERM $$"); code != 128+15 {
		t.Fatalf("a command killed by SIGTERM: exit %d (%s), want 143", code, errOut)
	}
	if code, _, _ := cli(t, "exec", "job", "--json", "--endpoints", eps, "--", "true"); code != exitUsage {
		t.Fatalf("exec --json: exit %d, want a usage error (exec prints no JSON)", code)
	}
}

// Every flag can come from RAFTLOCK_*; the command line wins. Help spells
// flags --name; version and completion work.
func TestEnvironmentVersionCompletionAndHelp(t *testing.T) {
	eps := startCluster(t)
	t.Setenv("RAFTLOCK_ENDPOINTS", eps)
	t.Setenv("RAFTLOCK_LEASE", "42s")
	code, out, errOut := cli(t, "acquire", "env-key", "--json")
	if code != 0 || !strings.Contains(out, `"lease_ms":42000`) {
		t.Fatalf("acquire with RAFTLOCK_LEASE=42s: exit %d %q %s", code, out, errOut)
	}
	code, out, _ = cli(t, "acquire", "env-key-2", "--lease", "7s", "--json")
	if code != 0 || !strings.Contains(out, `"lease_ms":7000`) {
		t.Fatalf("--lease 7s over RAFTLOCK_LEASE: exit %d %q", code, out)
	}
	if code, out, _ := cli(t, "--version"); code != 0 || !strings.HasPrefix(out, "raftlock ") || !strings.Contains(out, "go1.") {
		t.Fatalf("--version: exit %d %q", code, out)
	}
	for _, sh := range []string{"bash", "zsh"} {
		if code, out, _ := cli(t, "completion", sh); code != 0 || !strings.Contains(out, "__complete") {
			t.Fatalf("completion %s: exit %d", sh, code)
		}
	}
	if _, out, _ := cli(t, "__complete", "acquire", "--le"); strings.TrimSpace(out) != "--lease" {
		t.Fatalf("completing 'acquire --le': %q", out)
	}
	if _, out, _ := cli(t, "__complete", "sta"); strings.TrimSpace(out) != "status" {
		t.Fatalf("completing 'sta': %q", out)
	}
	if _, out, _ := cli(t, "__complete", "member", "pr"); strings.TrimSpace(out) != "promote" {
		t.Fatalf("completing 'member pr': %q", out)
	}
	if _, out, _ := cli(t, "__complete", "member", "add", "--client"); strings.TrimSpace(out) != "--client-addr" {
		t.Fatalf("completing 'member add --client': %q", out)
	}
	if _, _, errOut := cli(t, "get", "--help"); !strings.Contains(errOut, "  --endpoints") || strings.Contains(errOut, "  -endpoints") {
		t.Fatalf("help does not spell flags --name:\n%s", errOut)
	}
	t.Setenv("RAFTLOCK_LEASE", "soon")
	if code, _, errOut := cli(t, "acquire", "k"); code != exitUsage || !strings.Contains(errOut, "RAFTLOCK_LEASE") {
		t.Fatalf("a bad RAFTLOCK_LEASE: exit %d %q", code, errOut)
	}
}

// With --json a failed call says what happened on stdout too, so a script
// reads one place; the exit code stays the command's.
func TestJSONFailuresOnStdout(t *testing.T) {
	eps := startCluster(t)
	if code, _, _ := cli(t, "acquire", "jk", "--endpoints", eps); code != 0 {
		t.Fatalf("acquire: exit %d", code)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"acquire", "jk"}, exitHeld, `"error":"held"`},
		{[]string{"release", "jk", "--token", "999"}, exitNotOwner, `"error":"not-found"`},
		{[]string{"renew", "jk", "--token", "999"}, exitNotOwner, `"error":"not-found"`},
	} {
		code, out, _ := cli(t, append(tc.args, "--json", "--endpoints", eps)...)
		if code != tc.code || !strings.Contains(out, tc.want) || !strings.Contains(out, `"key":"jk"`) {
			t.Errorf("%v --json: exit %d, stdout %q; want exit %d and %s", tc.args, code, out, tc.code, tc.want)
		}
	}
}

// A bad flag or a missing argument is one line on stderr that names the
// flag as --name and where the usage is, with exit 2; --help alone prints
// the usage.
func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"leader", "transfer", "--to", "abc"},
		{"snapshot", "save"},
		{"snapshot", "restore", "x", "--id", "x"},
		{"acquire"},
		{"get", "k", "--bogus"},
		{"status", "--json=maybe"},
		{"node", "--id"},
		{"member", "add", "--id", "x"},
		{"cluster", "--data", "a", "--dir", "b"}, // one setting, given twice
	} {
		code, out, errOut := cli(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "--help)") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line", args, code, out, errOut, exitUsage)
		}
		if strings.Contains(errOut, " -") && !strings.Contains(errOut, " --") {
			t.Errorf("%v: flag not spelled --name: %q", args, errOut)
		}
	}
	if code, _, errOut := cli(t, "snapshot", "save", "--help"); code != 0 || !strings.HasPrefix(errOut, "usage: raftlock snapshot save") {
		t.Errorf("snapshot save --help: exit %d %q", code, errOut)
	}
	// --dir is an alias of --data: both, on the command line or in the
	// environment, is refused; the command line still wins over the
	// environment.
	if code, _, errOut := cli(t, "cluster", "--dir=a", "-data", "b"); code != exitUsage || !strings.Contains(errOut, "--dir is an alias of --data") {
		t.Errorf("cluster --dir=a -data b: exit %d %q", code, errOut)
	}
	t.Setenv("RAFTLOCK_DATA", "a")
	t.Setenv("RAFTLOCK_DIR", "b")
	if code, _, errOut := cli(t, "cluster"); code != exitUsage || !strings.Contains(errOut, "RAFTLOCK_DIR is an alias of RAFTLOCK_DATA") {
		t.Errorf("cluster with RAFTLOCK_DATA and RAFTLOCK_DIR: exit %d %q", code, errOut)
	}
	// help CMD [SUB] is CMD [SUB] --help, as in go help and git help.
	for _, args := range [][]string{{"help", "acquire"}, {"help", "snapshot", "save"}} {
		want := "usage: raftlock " + strings.Join(args[1:], " ")
		if code, _, errOut := cli(t, args...); code != 0 || !strings.HasPrefix(errOut, want) {
			t.Errorf("%v: exit %d %q, want %q", args, code, errOut, want)
		}
	}
}

// snapshot save checks where the backup goes before it asks the cluster,
// and names that directory, not the temporary file it would have used.
func TestSnapshotSaveRefusesAMissingDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "missing", "locks.backup")
	code, out, errOut := cli(t, "snapshot", "save", file, "--endpoints", "127.0.0.1:1")
	if code != exitError || out != "" || !strings.Contains(errOut, "missing is not a directory") || strings.Contains(errOut, ".tmp-") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// With --json, the snapshot and certs commands' failures are objects on
// stdout too, as the lock and admin commands' are; usage errors stay on
// stderr.
func TestSnapshotAndCertsFailuresAsJSON(t *testing.T) {
	dir := t.TempDir()
	backup := filepath.Join(dir, "not-a-backup")
	if err := os.WriteFile(backup, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cli(t, "certs", "init", "--out", filepath.Join(dir, "certs"), "--members", "1"); code != 0 {
		t.Fatalf("certs init: exit %d, %s", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"snapshot", "save", filepath.Join(dir, "locks.backup"), "--endpoints", "127.0.0.1:1"}, "no member reachable"},
		{[]string{"snapshot", "save", filepath.Join(dir, "missing", "locks.backup")}, "missing is not a directory"},
		{[]string{"snapshot", "restore", backup, "--data", filepath.Join(dir, "data"), "--id", "1", "--peers", "1=127.0.0.1:7001"}, "not a valid raftlock backup"},
		{[]string{"certs", "init", "--out", filepath.Join(dir, "certs"), "--members", "1"}, "already exists"},
	} {
		code, out, _ := cli(t, append(tc.args, "--json")...)
		var got map[string]string
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitError || got["error"] != "error" || !strings.Contains(got["message"], tc.msg) {
			t.Errorf("%v --json: exit %d, stdout %q (%v)", tc.args, code, out, err)
		}
	}
	if code, out, _ := cli(t, "certs", "init", "--json"); code != exitUsage || out != "" {
		t.Errorf("certs init --json without --out: exit %d, stdout %q; want a usage error on stderr only", code, out)
	}
}

// The peer frame limit and the snapshot chunk size are checked before
// anything is created, each error naming the flag at fault.
func TestFrameLimitAndChunkSizeRefusedNamingTheFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--peer-frame-limit", "1000", "--snapshot-chunk-size", "500"}, "--peer-frame-limit 1000 is below 65536"},
		{[]string{"--peer-frame-limit", "-5"}, "--peer-frame-limit -5 is below"},
		{[]string{"--peer-frame-limit", "65536"}, "--snapshot-chunk-size 1048576 must be at most --peer-frame-limit 65536"},
		{[]string{"--snapshot-chunk-size", "0"}, "--snapshot-chunk-size 0 must be > 0"},
	} {
		code, _, errOut := cli(t, append([]string{"node", "--id", "1", "--peers", "1=127.0.0.1:7001", "--data", dir}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errOut, exitUsage, c.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Fatalf("%v: the data directory was created", c.args)
		}
	}
}

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

// A release build prints the version make release stamped in; any other
// build prints the module version Go recorded, never an empty one.
func TestVersionPrintsTheReleaseVersion(t *testing.T) {
	code, out, _ := cli(t, "version")
	if first, _, _ := strings.Cut(out, "\n"); code != 0 || !strings.HasPrefix(first, "raftlock ") || first == "raftlock " {
		t.Fatalf("version: exit %d, %q", code, out)
	}
	defer func(v string) { releaseVersion = v }(releaseVersion)
	releaseVersion = "v1.2.3"
	if code, out, _ := cli(t, "version"); code != 0 || !strings.HasPrefix(out, "raftlock v1.2.3\ncommit ") {
		t.Fatalf("release build's version: exit %d, %q", code, out)
	}
}

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
		if keys := slices.Sorted(maps.Keys(ev)); fmt.Sprint(keys) != "[index key lease_ms owner token type]" || ev["type"] != "granted" ||
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

// A client named like a member (member-N) would be refused by every
// member's ports (tlsconfig.Identity): certs init refuses to issue one, in
// one line, as a usage error, and writes nothing.
func TestCertsInitRefusesMemberLikeClientNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	code, out, errOut := cli(t, "certs", "init", "--out", dir, "--members", "3", "--clients", "admin,member-9")
	if code != exitUsage || out != "" {
		t.Fatalf("exit %d, stdout %q; want exit %d and nothing on stdout", code, out, exitUsage)
	}
	if !strings.Contains(errOut, "client names may not look like member names (member-N)") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("stderr %q: want one line saying client names may not look like member names", errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused certs init wrote %s (%v)", dir, err)
	}
	// Names that only resemble one are a client's to take.
	if code, _, errOut := cli(t, "certs", "init", "--out", dir, "--members", "1", "--clients", "member-x,member-0,members-9"); code != 0 {
		t.Fatalf("certs init with names unlike a member's: exit %d, %s", code, errOut)
	}
}

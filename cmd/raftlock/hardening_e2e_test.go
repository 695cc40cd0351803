package main

// Issue 37's findings 6 and 7 over real processes and the CLI: admin is
// scoped to its rule's prefixes, and an open watch ends when the ACL that
// allowed it is reloaded without it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// issue37ACL is the review's ACL: admin on everything, alice with lock and
// read on a/, aadmin with lock, read and admin on a/, and eve (who has a
// certificate) with no rule at all.
const issue37ACL = `{"rules":[
 {"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]},
 {"identity":"alice","prefixes":["a/"],"rights":["lock","read"]},
 {"identity":"aadmin","prefixes":["a/"],"rights":["lock","read","admin"]}]}`

const issue37Clients = "admin,alice,aadmin,eve"

// Issue 37, finding 6: aadmin, admin on a/ only, force-released b/secret
// and saved a snapshot of the whole table. Both need admin where the key
// is (every key, for a snapshot): exit 6, and no file.
func TestScopedAdminCannotReachOutsideItsPrefix(t *testing.T) {
	startsProcesses(t)
	tc := newTLSClusterFor(t, issue37ACL, issue37Clients, nil)
	tok := tc.acquire(t, "admin", "b/secret")
	tc.acquire(t, "aadmin", "a/own")

	r := runCLI(t, tc.bin, tc.as("aadmin"), "release", "b/secret", "--force")
	if r.code != exitPermission || !strings.Contains(r.stderr, "permission denied") {
		t.Errorf("aadmin's release b/secret --force: exit %d, %q; want %d, permission denied", r.code, r.stderr, exitPermission)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	r = runCLI(t, tc.bin, tc.as("aadmin"), "snapshot", "save", backup)
	if r.code != exitPermission || !strings.Contains(r.stderr, "permission denied") {
		t.Errorf("aadmin's snapshot save: exit %d, %q; want %d, permission denied", r.code, r.stderr, exitPermission)
	}
	if _, err := os.Stat(backup); err == nil {
		t.Error("aadmin's refused snapshot save left a file")
	}
	// b/secret is still admin's, and aadmin's admin works where it is
	// granted: the refusals above are the scope, not a broken right.
	r = runCLI(t, tc.bin, tc.as("admin"), "get", "b/secret", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"token":`+strconv.FormatUint(tok, 10)) {
		t.Errorf("b/secret after aadmin's attempt: exit %d, %q %q; want held with token %d", r.code, r.stdout, r.stderr, tok)
	}
	if r := runCLI(t, tc.bin, tc.as("aadmin"), "release", "a/own", "--force"); r.code != 0 {
		t.Errorf("aadmin's release a/own --force: exit %d, %q", r.code, r.stderr)
	}
}

// Issue 37, finding 7: after alice was removed from the ACL and every
// member reloaded it, her open watches still received events. Now the
// CLI's `watch a/` ends with a permission error within a second of the
// reloads.
func TestWatchEndsWhenTheACLDropsItsIdentity(t *testing.T) {
	startsProcesses(t)
	tc := newTLSClusterFor(t, issue37ACL, issue37Clients, nil)
	tc.acquire(t, "alice", "a/before")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tc.bin, "watch", "a/")
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RAFTLOCK_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, tc.as("alice")...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	sc := startScanning(t, cmd, cmd.StdoutPipe)
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The watch is running once it shows one of alice's grants. A watch
	// starts "from now", and under load the CLI may start it after a
	// grant applied: grant again until one shows.
	for i := 0; ; i++ {
		if i == 30 {
			t.Fatal("alice's watch showed none of 30 grants under a/")
		}
		tc.acquire(t, "alice", fmt.Sprintf("a/during-%d", i))
		if watchShows(t, lines, "granted a/during", 2*time.Second) {
			break
		}
	}

	// Alice is gone from the ACL; every member reloads it at once.
	if err := os.WriteFile(tc.acl, []byte(`{"rules":[{"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	reloaded := time.Now()
	for _, m := range tc.members {
		m.cmd.Process.Signal(syscall.SIGHUP)
	}
	for range lines {
	}
	err := cmd.Wait()
	took := time.Since(reloaded)
	t.Logf("alice's watch ended %v after the SIGHUPs: exit %d, %q", took.Round(time.Millisecond), exitCode(err), strings.TrimSpace(stderr.String()))
	if code := exitCode(err); code != exitPermission || !strings.Contains(stderr.String(), "permission denied") {
		t.Errorf("alice's watch ended with exit %d, %q; want %d, permission denied", code, stderr.String(), exitPermission)
	}
	if took > time.Second {
		t.Errorf("alice's watch ended %v after the ACL reloads, want within a second", took)
	}
	for _, m := range tc.members {
		tc.waitLog(t, m, "SIGHUP: ACL reloaded")
	}
}

// watchShows reads lines until one contains want (true), within wait
// (false). The watch ending first fails t.
func watchShows(t *testing.T, lines <-chan string, want string, wait time.Duration) bool {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the watch ended before it showed a grant")
			}
			if strings.Contains(line, want) {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

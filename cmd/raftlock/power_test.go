package main

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/chaos/lazyfs"
)

// Unmount after the harness is killed: a harness killed with SIGKILL in
// the middle of a power run leaves its members' lazyfs mounts behind,
// dead (every access fails with ENOTCONN, and the report directory
// cannot be removed). The next run into the same report directory
// unmounts them before it replaces the report, runs, and leaves no
// mount of its own.
func TestPowerRunUnmountsWhatAKilledHarnessLeft(t *testing.T) {
	startsProcesses(t)
	if err := lazyfs.Available(); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	bin := buildBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	// Registered after TempDir's removal, so it runs first: whatever
	// fails below, no mount outlives the test.
	t.Cleanup(func() {
		for _, m := range lazyfsMountsUnder(t, out) {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	args := []string{"chaos", "--nemesis", "power", "--seed", "5", "--out", out, "--fault-interval", "1s", "--fault-duration", "1s"}
	code, _, progress := interruptChaos(t, bin, append(args, "--duration", "30s"), " ok=", syscall.SIGKILL, false)
	if code != -1 {
		t.Fatalf("harness exit %d, want killed\n%s", code, progress)
	}
	noneLeftNaming(t, out) // the members die with the harness
	left := lazyfsMountsUnder(t, out)
	if len(left) != 3 {
		t.Fatalf("the killed harness left %d lazyfs mounts under %s, want the 3 members' (%v)", len(left), out, left)
	}
	for _, m := range left {
		// A mount whose connection a process still holds (a member that
		// inherited /dev/fuse) is not aborted: touching it hangs.
		errc := make(chan error, 1)
		go func() {
			_, err := os.Stat(filepath.Join(m, "x"))
			errc <- err
		}()
		select {
		case err := <-errc:
			if !errors.Is(err, syscall.ENOTCONN) {
				t.Errorf("%s: a dead mount should answer ENOTCONN, got %v", m, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: stat hangs: the mount outlived its server without being aborted", m)
		}
	}

	stdout, stderr, code := runBin(t, bin, append(args, "--duration", "2s")...)
	if code != 0 {
		t.Fatalf("the next run: exit %d, want 0 (valid)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if left := lazyfsMountsUnder(t, out); len(left) > 0 {
		t.Fatalf("after the next run, lazyfs mounts remain: %v", left)
	}
	for _, id := range []string{"1", "2", "3"} {
		if _, err := os.ReadDir(filepath.Join(out, "logs", "data-"+id)); err != nil {
			t.Errorf("member %s's data directory after the next run: %v", id, err)
		}
	}
}

// lazyfsMountsUnder lists the lazyfs mountpoints under dir, from
// /proc/mounts.
func lazyfsMountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/mounts")
	if err != nil {
		t.Skipf("no /proc/mounts: %v", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && strings.Contains(fields[2], "lazyfs") && strings.HasPrefix(fields[1], dir+string(filepath.Separator)) {
			out = append(out, fields[1])
		}
	}
	return out
}

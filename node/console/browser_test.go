package console_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node/nodetest"
)

// chromium finds Debian's headless browser, or skips t saying how to
// install it (.ci/run does, through make browser).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium not installed: apt-get install -y chromium (or make browser) to run the console in a real browser")
	return ""
}

// browse runs headless chromium on url with args (--dump-dom, or
// --screenshot=FILE), letting the page run for a few seconds of virtual
// time, and returns what it printed. Chromium runs in a process group of
// its own, all of which a timeout ends.
func browse(t *testing.T, bin, profile, url string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-extensions", "--hide-scrollbars", "--user-data-dir=" + profile,
		"--window-size=1400,1000", "--virtual-time-budget=6000"}, args...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its helpers, if any outlived it
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", bin, err, lastLines(stderr.String(), 5))
	}
	return out.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// screenshotDir is where the test leaves its screenshot:
// $RAFTLOCK_SCREENSHOT_DIR, else testdata/out (ignored by git).
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("RAFTLOCK_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join("testdata", "out")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// A real browser loads the leader's console of a three-member cluster
// holding locks, one of them waited on: the rendered page shows every
// member, the leader and the held keys; its screenshot is kept.
func TestConsoleInABrowser(t *testing.T) {
	bin := chromium(t)
	c := nodetest.New(t, 3, nil)
	leader := c.WaitLeader()
	keys := []string{"jobs/build-42", "jobs/deploy-prod", "cron/cleanup", "db/migrations/2026-12"}
	hold(t, leader, keys...)
	wctx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	go leader.AcquireAs(wctx, "jobs/build-42", "waiter", time.Minute, time.Minute, 0)
	_, urls := consoles(t, c)
	url := urls[leader.ID()] + "/"
	profile := t.TempDir()

	want := []string{`data-ready="true"`, fmt.Sprintf("Leader: member %d", leader.ID())}
	for _, id := range c.IDs() {
		want = append(want, fmt.Sprintf(`data-member="%d"`, id))
	}
	for _, k := range keys {
		want = append(want, fmt.Sprintf(`data-key="%s"`, k))
	}
	var missing []string
	var err error
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var dom string
		dom, err = browse(t, bin, profile, url, "--dump-dom")
		missing = missing[:0]
		for _, w := range want {
			if !strings.Contains(dom, w) {
				missing = append(missing, w)
			}
		}
		// Every member answered and is healthy; the leader's row is marked.
		if strings.Count(dom, `class="health ok"`) != 3 {
			missing = append(missing, "3 healthy members")
		}
		if !strings.Contains(dom, fmt.Sprintf(`data-member="%d" data-role="leader" class="leader`, leader.ID())) {
			missing = append(missing, "the leader's row marked")
		}
		if err == nil && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rendered console lacks %q (last error %v)", missing, err)
		}
		time.Sleep(time.Second)
	}

	shot := filepath.Join(screenshotDir(t), "console.png")
	os.Remove(shot)
	if _, err := browse(t, bin, profile, url, "--screenshot="+shot); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (%v bytes)", shot, err, fi)
	}
	t.Logf("screenshot of the console: %s", shot)
	if errors.Is(wctx.Err(), context.Canceled) {
		t.Error("the waiter ended before the screenshot")
	}
}

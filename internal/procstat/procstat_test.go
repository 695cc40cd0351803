package procstat

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestParseTakesTheFieldsAfterTheLastParenthesis(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Stat
		ok   bool
	}{
		{"12 (sleep) S 1 12 12 0 -1", Stat{State: 'S', PGID: 12}, true},
		{"13 (a) b) (c) Z 12 40 40", Stat{State: 'Z', PGID: 40}, true},
		{"14 (sh) T", Stat{}, false},
		{"15 sh R 1 15", Stat{}, false},
		{"16 (sh) R 1 x", Stat{}, false},
	} {
		got, err := parse([]byte(tc.line))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parse(%q) = %+v, %v; want %+v (ok %v)", tc.line, got, err, tc.want, tc.ok)
		}
	}
}

// Whatever /proc hands back, parse returns a Stat or an error, never a
// panic; a Stat's state is the one byte after the last ')'.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{"12 (sleep) S 1 12 12 0 -1", "13 (a) b) (c) Z 12 40 40", "14 (sh) T", ")", "(", ""} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parse(b)
		if err != nil {
			return
		}
		i := bytes.LastIndexByte(b, ')')
		if f := bytes.Fields(b[i+1:]); len(f) == 0 || len(f[0]) != 1 || f[0][0] != st.State {
			t.Fatalf("parse(%q) = %+v: state is not the field after the last ')'", b, st)
		}
	})
}

func TestReadAndGroupSeeAStoppedChild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	st, err := Read(pid)
	if err != nil || st.PGID != pid || !st.Running() {
		t.Fatalf("Read(%d) = %+v, %v; want running, leading its own group", pid, st, err)
	}
	if pids, err := Group(pid); err != nil || !slices.Equal(pids, []int{pid}) {
		t.Fatalf("Group(%d) = %v, %v; want just the child", pid, pids, err)
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	deadline := time.Now().Add(10 * time.Second)
	for st, err = Read(pid); err == nil && !st.Stopped(); st, err = Read(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the child is %c 10 s after SIGSTOP, want stopped", st.State)
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := Read(pid); err == nil {
		t.Fatal("a reaped child still has a stat")
	}
}

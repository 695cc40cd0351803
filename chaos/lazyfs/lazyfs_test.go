package lazyfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mount mounts a fresh FS for t and unmounts it when t ends.
func mount(t *testing.T, opts Options) (*FS, string) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(dir, "state")
	}
	f, err := Mount(context.Background(), backing, mnt, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f, mnt
}

// write creates or opens name and writes data at off, syncing the file
// if sync.
func write(t *testing.T, name string, off int64, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func cut(t *testing.T, f *FS, mode CutMode) CutReport {
	t.Helper()
	rep, err := f.Cut(mode)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range rep.Lines {
		t.Log(l)
	}
	return rep
}

func wantContent(t *testing.T, name string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes %.40q..., want %d bytes %.40q...", name, len(got), got, len(want), want)
	}
}

func wantMissing(t *testing.T, name string) {
	t.Helper()
	if _, err := os.Lstat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: %v, want it gone", name, err)
	}
}

func randBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return b
}

func TestWriteDroppedUnlessSynced(t *testing.T) {
	f, mnt := mount(t, Options{})
	synced, unsynced := filepath.Join(mnt, "synced"), filepath.Join(mnt, "unsynced")
	write(t, synced, 0, []byte("kept"), true)
	write(t, unsynced, 0, []byte("dropped"), false)
	syncDir(t, mnt) // both names are durable; only one file's data is
	rep := cut(t, f, CutDropAll)
	wantContent(t, synced, []byte("kept"))
	wantContent(t, unsynced, nil)
	if rep.Files != 1 || rep.BytesDropped != int64(len("dropped")) {
		t.Errorf("report %+v, want 1 file and %d bytes dropped", rep, len("dropped"))
	}
}

func TestLaterUnsyncedWriteDropped(t *testing.T) {
	f, mnt := mount(t, Options{})
	name := filepath.Join(mnt, "f")
	base := randBytes(1, 3*PageSize+100)
	write(t, name, 0, base, true)
	syncDir(t, mnt)
	write(t, name, 5000, []byte("overwritten in the middle"), false)
	write(t, name, int64(len(base))+10000, []byte("appended past a hole"), false)
	rep := cut(t, f, CutDropAll)
	wantContent(t, name, base)
	if rep.Files != 1 || rep.BytesDropped == 0 {
		t.Errorf("report %+v", rep)
	}

	// A truncation is a write too.
	if err := os.Truncate(name, 10); err != nil {
		t.Fatal(err)
	}
	write(t, name, 20, []byte("regrown"), false)
	cut(t, f, CutDropAll)
	wantContent(t, name, base)

	// After a cut, what remains counts as synced.
	if rep := cut(t, f, CutDropAll); rep.Files != 0 || rep.EntriesUndone != 0 {
		t.Errorf("second cut: %+v, want nothing", rep)
	}
	wantContent(t, name, base)
}

func TestSyncedOpenKept(t *testing.T) {
	f, mnt := mount(t, Options{})
	name := filepath.Join(mnt, "f")
	write(t, name, 0, nil, true)
	syncDir(t, mnt)
	g, err := os.OpenFile(name, os.O_WRONLY|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write([]byte("O_SYNC")); err != nil {
		t.Fatal(err)
	}
	g.Close()
	cut(t, f, CutDropAll)
	wantContent(t, name, []byte("O_SYNC"))
}

func TestCreateDroppedUnlessDirSynced(t *testing.T) {
	f, mnt := mount(t, Options{})
	sub := filepath.Join(mnt, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	lost, kept := filepath.Join(sub, "lost"), filepath.Join(sub, "kept")
	write(t, lost, 0, []byte("data synced, name not"), true)
	if err := os.Mkdir(filepath.Join(mnt, "lostdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(mnt, "lostdir", "inside"), 0, []byte("x"), true)
	syncDir(t, filepath.Join(mnt, "lostdir"))
	rep := cut(t, f, CutDropAll)
	wantMissing(t, lost)
	wantMissing(t, filepath.Join(mnt, "lostdir"))
	if rep.EntriesUndone != 2 {
		t.Errorf("%d entries undone, want 2", rep.EntriesUndone)
	}

	write(t, kept, 0, []byte("all synced"), true)
	syncDir(t, sub)
	cut(t, f, CutDropAll)
	wantContent(t, kept, []byte("all synced"))
}

func TestRename(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("dirsync=%v", sync), func(t *testing.T) {
			f, mnt := mount(t, Options{})
			tmp, cur, old := filepath.Join(mnt, "CURRENT.tmp"), filepath.Join(mnt, "CURRENT"), filepath.Join(mnt, "OLD")
			write(t, cur, 0, []byte("v1"), true)
			write(t, old, 0, []byte("old"), true)
			syncDir(t, mnt)
			// The pattern of a store's pointer file: write a new
			// version aside, sync it, rename it over the old one.
			write(t, tmp, 0, []byte("v2"), true)
			if err := os.Rename(tmp, cur); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(old, filepath.Join(mnt, "NEW")); err != nil {
				t.Fatal(err)
			}
			if sync {
				syncDir(t, mnt)
			}
			cut(t, f, CutDropAll)
			if sync {
				wantContent(t, cur, []byte("v2"))
				wantMissing(t, tmp)
				wantMissing(t, old)
				wantContent(t, filepath.Join(mnt, "NEW"), []byte("old"))
			} else {
				wantContent(t, cur, []byte("v1"))
				wantMissing(t, tmp) // created unsynced, too
				wantContent(t, old, []byte("old"))
				wantMissing(t, filepath.Join(mnt, "NEW"))
			}
		})
	}
}

func TestUnlinkUndone(t *testing.T) {
	f, mnt := mount(t, Options{})
	name, dir := filepath.Join(mnt, "f"), filepath.Join(mnt, "d")
	write(t, name, 0, []byte("synced"), true)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	write(t, name, 0, []byte("SYNCED and then more"), false)
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, name)
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("mount shows %v after the removals, want nothing (the stash is hidden)", ents)
	}
	cut(t, f, CutDropAll)
	wantContent(t, name, []byte("synced"))
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("directory not back: %v", err)
	}

	// A synced unlink is for good, and leaves nothing in the stash.
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	cut(t, f, CutDropAll)
	wantMissing(t, name)
	if ents, _ := os.ReadDir(filepath.Join(f.Backing(), stashName)); len(ents) != 0 {
		t.Errorf("stash holds %v", ents)
	}
}

func TestTornWrite(t *testing.T) {
	const n = 16 * PageSize
	data := randBytes(2, n)
	lengths := map[int]bool{}
	for seed := range uint64(8) {
		f, mnt := mount(t, Options{Seed: seed})
		name := filepath.Join(mnt, "wal")
		write(t, name, 0, nil, true)
		syncDir(t, mnt)
		write(t, name, 0, data, false)
		rep := cut(t, f, CutTorn)
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(got)%PageSize != 0 || !bytes.Equal(got, data[:len(got)]) {
			t.Fatalf("seed %d: %d bytes kept, want a page-aligned prefix", seed, len(got))
		}
		if rep.BytesKept != int64(len(got)) || rep.BytesKept+rep.BytesDropped != n {
			t.Errorf("seed %d: report %+v, file has %d bytes", seed, rep, len(got))
		}
		lengths[len(got)] = true
		if err := f.Unmount(); err != nil {
			t.Fatal(err)
		}
	}
	if len(lengths) < 2 {
		t.Errorf("eight seeds tore at %v: want different places", lengths)
	}
}

func TestTornDeterministic(t *testing.T) {
	var got [2][]byte
	for i := range got {
		f, mnt := mount(t, Options{Seed: 7})
		for k := range 4 {
			write(t, filepath.Join(mnt, fmt.Sprint(k)), 0, randBytes(uint64(k), 10*PageSize), false)
		}
		syncDir(t, mnt)
		cut(t, f, CutTorn)
		for k := range 4 {
			b, _ := os.ReadFile(filepath.Join(mnt, fmt.Sprint(k)))
			got[i] = fmt.Appendf(got[i], "%d,", len(b))
		}
	}
	if !bytes.Equal(got[0], got[1]) {
		t.Errorf("same seed, different tears: %s and %s", got[0], got[1])
	}
}

func TestCutRefusedWhileInUse(t *testing.T) {
	f, mnt := mount(t, Options{})
	name := filepath.Join(mnt, "f")
	write(t, name, 0, []byte("x"), false)
	syncDir(t, mnt)
	g, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Cut(CutDropAll); err == nil {
		t.Error("cut with an open file: no error")
	}
	g.Close()
	wantContent(t, name, []byte("x"))
	cut(t, f, CutDropAll)
	wantContent(t, name, nil)
}

// TestHelperProcess is not a test: the tests below run it as a child
// that mounts and then is killed.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("LAZYFS_HELPER") != "mount" {
		t.Skip("a helper for other tests")
	}
	backing, mnt, state := os.Getenv("LAZYFS_BACKING"), os.Getenv("LAZYFS_MNT"), os.Getenv("LAZYFS_STATE")
	if _, err := Mount(context.Background(), backing, mnt, Options{StateDir: state}); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("mounted")
	time.Sleep(time.Minute)
	os.Exit(1)
}

func TestCleanStaleAfterKill(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	dir := t.TempDir()
	backing, mnt, state := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), filepath.Join(dir, "state")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "LAZYFS_HELPER=mount", "LAZYFS_BACKING="+backing, "LAZYFS_MNT="+mnt, "LAZYFS_STATE="+state)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, the mount goes.
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if mounted, _ := lazyfsMounted(mnt); mounted {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "mounted\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	write(t, filepath.Join(mnt, "f"), 0, []byte("through the mount"), false)

	// The harness dies without unmounting.
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(mnt, "f")); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("dead mount: stat gives %v, want ENOTCONN", err)
	}

	// Live mounts of this process are left alone.
	mount(t, Options{StateDir: state})

	cleaned, err := CleanStale(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(cleaned) != 1 || cleaned[0] != mnt {
		t.Fatalf("cleaned %v, want [%s]", cleaned, mnt)
	}
	if mounted, err := lazyfsMounted(mnt); mounted || err != nil {
		t.Fatalf("still mounted: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "g"), []byte("usable"), 0o644); err != nil {
		t.Fatalf("mountpoint not usable: %v", err)
	}
	ents, _ := os.ReadDir(state)
	if len(ents) != 1 {
		t.Errorf("state dir holds %d records, want the live mount's only", len(ents))
	}
	if cleaned, err := CleanStale(state); len(cleaned) != 0 || err != nil {
		t.Errorf("second clean: %v, %v", cleaned, err)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/tmp/a\040b\\c`); got != `/tmp/a b\\c` {
		t.Errorf("got %q", got)
	}
	if !strings.Contains(unescapeMount(`\011`), "\t") {
		t.Error("tab")
	}
}

// A process started after a mount does not inherit the FUSE connection:
// one that did kept the mount alive after its server died, and hung
// whatever touched it instead of letting the kernel abort it.
func TestMountIsNotInheritedByChildren(t *testing.T) {
	mount(t, Options{})
	out, err := exec.Command("ls", "-l", "/proc/self/fd/").CombinedOutput()
	if err != nil {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "/dev/fuse") {
		t.Fatalf("a child process holds /dev/fuse:\n%s", out)
	}
}

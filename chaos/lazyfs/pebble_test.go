package lazyfs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestPebbleHelper is not a test: TestPebbleSurvivesCut runs it as the
// member whose power is cut.
func TestPebbleHelper(t *testing.T) {
	if os.Getenv("LAZYFS_HELPER") != "pebble" {
		t.Skip("a helper for other tests")
	}
	db, err := pebble.Open(os.Getenv("LAZYFS_DB"), &pebble.Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for i := range 50 {
		if err := db.Set(fmt.Appendf(nil, "synced-%02d", i), []byte("v"), pebble.Sync); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
	}
	for i := range 50 {
		// Large enough to fill the WAL's blocks, which pebble hands
		// to the kernel without being asked to sync.
		if err := db.Set(fmt.Appendf(nil, "unsynced-%02d", i), make([]byte, 4096), pebble.NoSync); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
	}
	// Give the WAL's flusher the time to hand the unsynced writes to
	// the kernel: then only a power cut loses them.
	time.Sleep(200 * time.Millisecond)
	fmt.Println("written")
	time.Sleep(time.Minute)
	os.Exit(1)
}

// TestPebbleSurvivesCut shows that the FS is good enough for a member's
// store: pebble, killed and then cut, reopens with every synced write.
func TestPebbleSurvivesCut(t *testing.T) {
	f, mnt := mount(t, Options{})
	dir := filepath.Join(mnt, "db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPebbleHelper$")
	cmd.Env = append(os.Environ(), "LAZYFS_HELPER=pebble", "LAZYFS_DB="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "written\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	rep := cut(t, f, CutDropAll)
	if rep.BytesDropped == 0 {
		t.Error("the cut dropped nothing: the unsynced writes were synced?")
	}

	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatalf("reopen after the cut: %v", err)
	}
	defer db.Close()
	for i := range 50 {
		if _, c, err := db.Get(fmt.Appendf(nil, "synced-%02d", i)); err != nil {
			t.Errorf("synced-%02d: %v", i, err)
		} else {
			c.Close()
		}
	}
	lost := 0
	for i := range 50 {
		if _, c, err := db.Get(fmt.Appendf(nil, "unsynced-%02d", i)); err != nil {
			lost++
		} else {
			c.Close()
		}
	}
	t.Logf("%d of 50 unsynced writes lost", lost)
	if lost == 0 {
		t.Error("no unsynced write lost")
	}
}

// BenchmarkPebbleSyncedSet measures what the mount costs a synced
// write, beside the disk under it.
func BenchmarkPebbleSyncedSet(b *testing.B) {
	for _, on := range []string{"disk", "lazyfs"} {
		b.Run(on, func(b *testing.B) {
			dir := b.TempDir()
			if on == "lazyfs" {
				if err := Available(); err != nil {
					b.Skipf("no FUSE here: %v", err)
				}
				backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
				os.Mkdir(backing, 0o755)
				os.Mkdir(mnt, 0o755)
				f, err := Mount(b.Context(), backing, mnt, Options{StateDir: filepath.Join(dir, "state")})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { f.Unmount() })
				dir = mnt
			}
			db, err := pebble.Open(filepath.Join(dir, "db"), &pebble.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			v := make([]byte, 100)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := db.Set(fmt.Appendf(nil, "k%09d", i), v, pebble.Sync); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

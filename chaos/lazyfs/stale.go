package lazyfs

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// A mountRecord is the state file of one mount: who made it and where.
type mountRecord struct {
	PID int `json:"pid"`
	// Start is the owner's start time (field 22 of /proc/<pid>/stat):
	// a pid alone may since name another process.
	Start      string `json:"start"`
	Backing    string `json:"backing"`
	Mountpoint string `json:"mountpoint"`
}

// recordMount writes the state file of a mount by this process into dir
// and returns its path.
func recordMount(dir, backing, mountpoint string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("record mount: %w", err)
	}
	start, err := procStart(os.Getpid())
	if err != nil {
		return "", fmt.Errorf("record mount: %w", err)
	}
	b, err := json.Marshal(mountRecord{PID: os.Getpid(), Start: start, Backing: backing, Mountpoint: mountpoint})
	if err != nil {
		return "", fmt.Errorf("record mount: %w", err)
	}
	f, err := os.CreateTemp(dir, "mount-*.json")
	if err != nil {
		return "", fmt.Errorf("record mount: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("record mount: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("record mount: %w", err)
	}
	return f.Name(), nil
}

// procStart returns the start time of process pid, in clock ticks since
// boot.
func procStart(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// The command name, in parentheses, may hold spaces: count the
	// fields after its closing parenthesis, which is field 2.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return fields[19], nil
}

// CleanStale unmounts the mounts recorded in dir (DefaultStateDir() if
// empty) whose owner is dead: what a process killed with SIGKILL, or
// any process that died before unmounting, left. The kernel has then
// aborted each such mount, and every access to its mountpoint fails
// with ENOTCONN ("transport endpoint is not connected") until it is
// unmounted. Mounts of processes still running are left alone, so
// several harnesses may share dir. CleanStale returns the mountpoints
// it unmounted; it does not touch the backing directories.
func CleanStale(dir string) ([]string, error) {
	if dir == "" {
		dir = DefaultStateDir()
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lazyfs: clean stale mounts: %w", err)
	}
	var cleaned []string
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "mount-") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var rec mountRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			// A record cut short by the death of its writer: the
			// mount was not made yet.
			os.Remove(path)
			continue
		}
		if start, err := procStart(rec.PID); err == nil && start == rec.Start {
			continue
		}
		// Unmount only a lazyfs mount: the mountpoint may have been
		// reused since, or never mounted.
		for {
			mounted, err := lazyfsMounted(rec.Mountpoint)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if !mounted {
				break
			}
			// MNT_DETACH: an aborted FUSE mount may still be some
			// dead process's working directory.
			if err := syscall.Unmount(rec.Mountpoint, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("lazyfs: unmount %s: %w", rec.Mountpoint, err))
				break
			}
			if !slices.Contains(cleaned, rec.Mountpoint) {
				cleaned = append(cleaned, rec.Mountpoint)
			}
		}
		if err := os.Remove(path); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cleaned, fmt.Errorf("lazyfs: clean stale mounts in %s: %w", dir, err)
	}
	return cleaned, nil
}

// lazyfsMounted reports whether a lazyfs filesystem is mounted at
// mountpoint.
func lazyfsMounted(mountpoint string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// Fields: id parent major:minor root mountpoint options
		// [optional...] - fstype source superoptions.
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMount(fields[4]) != mountpoint {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && fields[i+1] == "fuse.lazyfs" {
				return true, nil
			}
		}
	}
	return false, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for a space) of a path
// in /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Package lazyfs mounts a FUSE filesystem that forgets what was not
// synced, so that a test harness can cut the power of a real process.
//
// A process killed with SIGKILL loses nothing it wrote: the kernel keeps
// its page cache and writes it back later. A power failure loses every
// write that no fsync made durable. A [FS] passes every call through to a
// backing directory at once, so the process reads what it wrote, as it
// would from the page cache, and remembers in its own memory what it
// needs to undo whatever was not yet synced:
//
//   - for each file, the bytes and the size it had at its last fsync or
//     fdatasync (saved one 4 KiB page at a time, before the first write to
//     that page since the sync);
//   - for each directory, the entries created, removed, renamed or linked
//     since that directory's last fsync.
//
// [FS.Cut] rolls the backing directory back to that synced state, as a
// power cut would, and reports what it dropped. The memory an FS holds is
// bounded by what is unsynced: one saved page per page written over
// synced data, one record and one open descriptor per unsynced directory
// change. An fsync releases what it made durable.
//
// A mount must not outlive the process that made it. [FS.Unmount] undoes
// it; every mount is also recorded in a state directory, so that
// [CleanStale] in the next run can undo what a process killed with
// SIGKILL left behind.
//
// Mounting needs root and /dev/fuse; [Available] says whether this
// process has both.
//
// What an FS does not model: permissions, owners, timestamps and
// extended attributes pass through and are never rolled back; a write
// through a descriptor opened with O_SYNC or O_DSYNC makes its whole
// file durable, as an fdatasync would; a rename is durable once its new
// directory is synced (a real filesystem may make it durable sooner);
// files created with O_TMPFILE are refused, and copy_file_range falls
// back to reads and writes.
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// PageSize is the unit in which an FS saves synced data and in which
// [CutTorn] tears a file's unsynced writes.
const PageSize = 4096

// stashName is the hidden directory, at the root of the backing
// directory, that keeps removed and replaced entries until their
// directory is synced, so that a cut can put them back. The mount never
// shows it.
const stashName = ".lazyfs-stash"

// Options configure a mount. The zero value is usable.
type Options struct {
	// Seed chooses, deterministically, how much of each file CutTorn
	// keeps. Two FS with the same seed, the same unsynced state and the
	// same sequence of cuts make the same choices.
	Seed uint64

	// StateDir is where the mount is recorded for CleanStale. If empty,
	// DefaultStateDir() is used.
	StateDir string

	// Logger receives the mount's events; nil discards them.
	Logger *slog.Logger
}

// DefaultStateDir returns the directory in which mounts are recorded
// when Options.StateDir is empty.
func DefaultStateDir() string {
	return filepath.Join(os.TempDir(), "raftlock-lazyfs")
}

// Available reports why this process cannot mount an FS, or nil if it
// can: mounting needs /dev/fuse and root.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("lazyfs: mounting needs root")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazyfs: %w", err)
	}
	f.Close()
	return nil
}

// An FS is a mounted filesystem that forgets unsynced writes on command.
// Its methods may be called from several goroutines.
type FS struct {
	backing    string
	mountpoint string
	seed       uint64
	stateFile  string
	log        *slog.Logger

	// life serializes Cut and Unmount, which replace or remove server.
	life      sync.Mutex
	server    *fuse.Server // nil while a cut remounts, or if it failed to
	unmounted bool
	cuts      uint64

	j *journal
}

// Mount mounts a filesystem at mountpoint whose contents are those of
// the directory backing, and which remembers what was not synced. Both
// must be existing directories. ctx bounds the mount itself, not the
// life of the FS: the caller must call Unmount.
//
// Mount removes the backing directory's stash of a previous mount, if
// any: what it held had been removed by the process, and nobody can put
// it back any more.
func Mount(ctx context.Context, backing, mountpoint string, opts Options) (*FS, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	mountpoint, err = filepath.Abs(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	for _, d := range []string{backing, mountpoint} {
		fi, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("lazyfs: mount %s: %s is not a directory", mountpoint, d)
		}
	}
	stash := filepath.Join(backing, stashName)
	if err := os.RemoveAll(stash); err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: clear stash: %w", mountpoint, err)
	}
	if err := os.Mkdir(stash, 0o700); err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	j, err := newJournal(backing, stash)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &FS{
		backing:    backing,
		mountpoint: mountpoint,
		seed:       opts.Seed,
		log:        log.With("mountpoint", mountpoint),
		j:          j,
	}
	stateDir := opts.StateDir
	if stateDir == "" {
		stateDir = DefaultStateDir()
	}
	// Record the mount before making it: a process killed between the
	// two leaves a record of a mount that does not exist, which
	// CleanStale ignores, never a mount without a record.
	f.stateFile, err = recordMount(stateDir, backing, mountpoint)
	if err != nil {
		j.close()
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	if err := f.mount(); err != nil {
		os.Remove(f.stateFile)
		j.close()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		f.Unmount()
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	f.log.Info("lazyfs: mounted", "backing", backing)
	return f, nil
}

// mount starts a FUSE server for f. The caller holds f.life or has not
// yet published f.
func (f *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(f.backing, &st); err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.mountpoint, err)
	}
	lroot := &fs.LoopbackRoot{Path: f.backing, Dev: st.Dev}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: lroot}, j: f.j}
	lroot.RootNode = root
	sec := time.Second
	server, err := fs.Mount(f.mountpoint, root, &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			// DirectMountStrict mounts with mount(2), as root, and
			// never looks for a fusermount binary.
			DirectMountStrict: true,
			FsName:            f.backing,
			Name:              "lazyfs",
			Logger:            slog.NewLogLogger(f.log.Handler(), slog.LevelDebug),
		},
	})
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.mountpoint, err)
	}
	f.server = server
	if err := fuseCloseOnExec(); err != nil {
		server.Unmount()
		return fmt.Errorf("lazyfs: mount %s: %w", f.mountpoint, err)
	}
	return nil
}

// fuseCloseOnExec marks every /dev/fuse descriptor of this process
// close-on-exec. go-fuse (v2.12.1, mount_linux.go) opens /dev/fuse with
// syscall.Open, without O_CLOEXEC, so every process started after a
// mount inherited the connection: after the harness was killed, the
// members it had started kept its mounts alive with nobody serving them,
// and a member blocked on one of their requests (its files' flush as it
// exited) waited forever, as did anything that touched the mountpoint,
// instead of the kernel aborting the mounts (ENOTCONN) for CleanStale.
// The processes a harness starts do so between mounts, never during one.
func fuseCloseOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list this process's descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == "/dev/fuse" {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// Mountpoint returns the directory at which f is mounted.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Backing returns the directory that holds f's contents.
func (f *FS) Backing() string { return f.backing }

// Unmount unmounts f. It keeps every write, synced or not, in the
// backing directory, as a clean shutdown would, and forgets what f
// remembered. It fails if a process still uses the mount. Calling it
// again does nothing and returns nil.
func (f *FS) Unmount() error {
	f.life.Lock()
	defer f.life.Unlock()
	if f.unmounted {
		return nil
	}
	if f.server != nil {
		if err := f.server.Unmount(); err != nil {
			return fmt.Errorf("lazyfs: unmount %s: %w", f.mountpoint, err)
		}
		f.server.Wait()
		f.server = nil
	}
	f.unmounted = true
	f.j.close()
	if err := os.RemoveAll(filepath.Join(f.backing, stashName)); err != nil {
		f.log.Warn("lazyfs: remove stash", "err", err)
	}
	if err := os.Remove(f.stateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lazyfs: unmount %s: %w", f.mountpoint, err)
	}
	f.log.Info("lazyfs: unmounted")
	return nil
}

// CutMode says what a cut keeps of the unsynced writes.
type CutMode int

const (
	// CutDropAll rolls every file and directory back to its last
	// synced state.
	CutDropAll CutMode = iota

	// CutTorn keeps, of each file's unsynced pages in offset order, a
	// prefix that ends at a page boundary chosen from Options.Seed, and
	// drops the rest: the disk wrote the file's pages in order and lost
	// power part of the way. Unsynced directory changes are all undone,
	// as in CutDropAll.
	CutTorn
)

func (m CutMode) String() string {
	switch m {
	case CutDropAll:
		return "drop-all"
	case CutTorn:
		return "torn"
	}
	return fmt.Sprintf("CutMode(%d)", int(m))
}

// A CutReport says what a cut dropped.
type CutReport struct {
	Mode CutMode

	// Files is the number of files whose content or size the cut
	// changed.
	Files int

	// BytesDropped counts the unsynced bytes the cut removed;
	// BytesKept, those that CutTorn let survive.
	BytesDropped int64
	BytesKept    int64

	// EntriesUndone counts the directory changes the cut undid.
	EntriesUndone int

	// Lines describe each file and entry, one a line, with paths
	// relative to the backing directory, for a history.
	Lines []string
}

// Cut does to f what a power failure does to a disk: it drops the writes
// and directory changes that were not synced (keeping, with CutTorn, a
// page-aligned prefix of each file's unsynced writes). Everything that
// remains then counts as synced.
//
// No process may use the mount during a cut: the caller kills them
// first. Cut unmounts f, rolls the backing directory back and mounts it
// again, so that neither the kernel's caches nor the FUSE server's
// remember what the cut removed. If it cannot unmount, because a process
// still uses the mount, it returns an error and changes nothing.
func (f *FS) Cut(mode CutMode) (CutReport, error) {
	f.life.Lock()
	defer f.life.Unlock()
	rep := CutReport{Mode: mode}
	if f.unmounted || f.server == nil {
		return rep, fmt.Errorf("lazyfs: cut %s: not mounted", f.mountpoint)
	}
	if mode != CutDropAll && mode != CutTorn {
		return rep, fmt.Errorf("lazyfs: cut %s: unknown mode %v", f.mountpoint, mode)
	}
	if err := f.server.Unmount(); err != nil {
		return rep, fmt.Errorf("lazyfs: cut %s: unmount: %w", f.mountpoint, err)
	}
	f.server.Wait()
	f.server = nil
	f.cuts++
	cutErr := f.j.cut(mode, f.seed, f.cuts, &rep)
	if err := f.mount(); err != nil {
		return rep, errors.Join(cutErr, err)
	}
	f.log.Info("lazyfs: cut", "mode", mode, "files", rep.Files,
		"bytes_dropped", rep.BytesDropped, "bytes_kept", rep.BytesKept,
		"entries_undone", rep.EntriesUndone, "err", cutErr)
	if cutErr != nil {
		return rep, fmt.Errorf("lazyfs: cut %s: %w", f.mountpoint, cutErr)
	}
	return rep, nil
}

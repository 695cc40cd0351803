package lazyfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// A node is go-fuse's loopback node with the changes it passes through
// recorded in the journal. Everything it does not override (reads,
// attributes, extended attributes, locks) passes through unrecorded:
// a power cut loses none of it that matters here.
type node struct {
	*fs.LoopbackNode
	j *journal
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeReaddirer      = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
	_ loopbackFile          = (*handle)(nil)
)

// WrapChild makes every node of the tree a *node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if ln, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: ln, j: n.j}
	}
	return ops
}

func (n *node) ino() uint64 { return n.StableAttr().Ino }

// path returns the node's path in the backing directory.
func (n *node) path() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

// hidden reports whether name, in n, is the stash, which the mount
// never shows.
func (n *node) hidden(name string) bool {
	return name == stashName && n.IsRoot()
}

// openPath opens the node's backing file for the journal.
func (n *node) openPath() (*os.File, error) {
	return os.OpenFile(n.path(), os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
}

// opener returns how the journal opens the node's backing inode: through
// the handle if there is one, since a file open under a name that was
// since removed has no path any more.
func (n *node) opener(f fs.FileHandle) opener {
	h, ok := f.(*handle)
	if !ok {
		return n.openPath
	}
	return func() (*os.File, error) {
		fd, ok := h.fd()
		if !ok {
			return nil, syscall.EBADF
		}
		// Opened anew, not duplicated: the handle may be write-only.
		return os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDWR|syscall.O_CLOEXEC, 0)
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.ENOENT
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
}

// created records that name appeared in n.
func (n *node) created(name string, isDir bool) (*dirOp, syscall.Errno) {
	d, err := n.j.dirLocked(n.ino(), n.path())
	if err != nil {
		return nil, errnoOf(err)
	}
	return &dirOp{kind: opCreate, dir: d, name: name, isDir: isDir}, 0
}

// wrap makes a loopback file handle a *handle.
func wrap(fh fs.FileHandle, flags uint32) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh
	}
	return &handle{loopbackFile: lf, lf: lf, synced: flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0}
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (inode *fs.Inode, fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	if n.hidden(name) {
		return nil, nil, 0, syscall.EPERM
	}
	errno = n.j.record(func() (*dirOp, syscall.Errno) {
		// The kernel sends CREATE for a name it does not know; the
		// backing directory may have it all the same.
		var st unix.Stat_t
		existed := unix.Lstat(filepath.Join(n.path(), name), &st) == nil
		if existed && flags&syscall.O_EXCL != 0 {
			return nil, syscall.EEXIST
		}
		if !existed {
			d, err := n.j.dirLocked(n.ino(), n.path())
			if err != nil {
				return nil, errnoOf(err)
			}
			inode, fh, fuseFlags, errno = n.LoopbackNode.Create(ctx, name, flags, mode, out)
			if errno != 0 {
				return nil, errno
			}
			return &dirOp{kind: opCreate, dir: d, name: name}, 0
		}
		inode, fh, fuseFlags, errno = n.LoopbackNode.Create(ctx, name, flags&^syscall.O_TRUNC, mode, out)
		return nil, errno
	})
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fh = wrap(fh, flags)
	if flags&syscall.O_TRUNC != 0 {
		if child, ok := inode.Operations().(*node); ok {
			if errno := child.truncate(fh, 0); errno != 0 {
				return nil, nil, 0, errno
			}
		}
	}
	return inode, fh, fuseFlags, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	// The truncation is done here, where the journal sees it.
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags&^syscall.O_TRUNC)
	if errno != 0 {
		return nil, 0, errno
	}
	fh = wrap(fh, flags)
	if flags&syscall.O_TRUNC != 0 {
		if errno := n.truncate(fh, 0); errno != 0 {
			if r, ok := fh.(fs.FileReleaser); ok {
				r.Release(ctx)
			}
			return nil, 0, errno
		}
	}
	return fh, fuseFlags, 0
}

func (n *node) truncate(fh fs.FileHandle, size uint64) syscall.Errno {
	return n.j.truncate(n.ino(), n.opener(fh), int64(size), func() syscall.Errno {
		if h, ok := fh.(*handle); ok {
			return fs.ToErrno(unix.Ftruncate(must(h.fd()), int64(size)))
		}
		return fs.ToErrno(unix.Truncate(n.path(), int64(size)))
	})
}

func must(fd int, ok bool) int {
	if !ok {
		return -1
	}
	return fd
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (inode *fs.Inode, errno syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	errno = n.j.record(func() (*dirOp, syscall.Errno) {
		if inode, errno = n.LoopbackNode.Mkdir(ctx, name, mode, out); errno != 0 {
			return nil, errno
		}
		return n.created(name, true)
	})
	return inode, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (inode *fs.Inode, errno syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	errno = n.j.record(func() (*dirOp, syscall.Errno) {
		if inode, errno = n.LoopbackNode.Mknod(ctx, name, mode, rdev, out); errno != 0 {
			return nil, errno
		}
		return n.created(name, false)
	})
	return inode, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (inode *fs.Inode, errno syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	errno = n.j.record(func() (*dirOp, syscall.Errno) {
		if inode, errno = n.LoopbackNode.Symlink(ctx, target, name, out); errno != 0 {
			return nil, errno
		}
		return n.created(name, false)
	})
	return inode, errno
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (inode *fs.Inode, errno syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	errno = n.j.record(func() (*dirOp, syscall.Errno) {
		if inode, errno = n.LoopbackNode.Link(ctx, target, name, out); errno != 0 {
			return nil, errno
		}
		return n.created(name, false)
	})
	return inode, errno
}

// Tmpfile is refused: a file created with O_TMPFILE has no name the
// journal could follow. Programs fall back to a named file.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange is refused, so that the kernel copies through reads
// and writes, which the journal sees.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut, length, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// Unlink moves the entry to the stash instead of removing it, so that a
// cut can put it back.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.hidden(name) {
		return syscall.ENOENT
	}
	return n.j.record(func() (*dirOp, syscall.Errno) {
		return n.remove(name, false)
	})
}

// Rmdir moves the empty directory to the stash.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.hidden(name) {
		return syscall.ENOENT
	}
	return n.j.record(func() (*dirOp, syscall.Errno) {
		return n.remove(name, true)
	})
}

func (n *node) remove(name string, dir bool) (*dirOp, syscall.Errno) {
	p := filepath.Join(n.path(), name)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case dir && !isDir:
		return nil, syscall.ENOTDIR
	case !dir && isDir:
		return nil, syscall.EISDIR
	case dir:
		if errno := emptyDir(p); errno != 0 {
			return nil, errno
		}
	}
	d, err := n.j.dirLocked(n.ino(), n.path())
	if err != nil {
		return nil, errnoOf(err)
	}
	s := n.j.stashNameLocked()
	if err := unix.Renameat(d.fd, name, n.j.stashFd, s); err != nil {
		return nil, fs.ToErrno(err)
	}
	return &dirOp{kind: opRemove, dir: d, name: name, stash: s, isDir: dir}, 0
}

func emptyDir(p string) syscall.Errno {
	f, err := os.Open(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	if len(names) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0
}

// Rename keeps in the stash what the rename replaces.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if n.hidden(name) || np.hidden(newName) {
		return syscall.EPERM
	}
	if flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 {
		return syscall.EINVAL
	}
	return n.j.record(func() (*dirOp, syscall.Errno) {
		d, err := n.j.dirLocked(n.ino(), n.path())
		if err != nil {
			return nil, errnoOf(err)
		}
		nd, err := n.j.dirLocked(np.ino(), np.path())
		if err != nil {
			return nil, errnoOf(err)
		}
		op := &dirOp{kind: opRename, dir: d, name: name, newDir: nd, newName: newName}
		if flags&unix.RENAME_EXCHANGE != 0 {
			op.kind = opExchange
			return op, fs.ToErrno(unix.Renameat2(d.fd, name, nd.fd, newName, unix.RENAME_EXCHANGE))
		}
		var src, dst unix.Stat_t
		if err := unix.Fstatat(d.fd, name, &src, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, fs.ToErrno(err)
		}
		err = unix.Fstatat(nd.fd, newName, &dst, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err != nil && !errors.Is(err, unix.ENOENT):
			return nil, fs.ToErrno(err)
		case err != nil:
			// Nothing is replaced.
		case flags&unix.RENAME_NOREPLACE != 0:
			return nil, syscall.EEXIST
		case src.Ino == dst.Ino && src.Dev == dst.Dev:
			// Two names of one file: rename(2) does nothing.
			return nil, 0
		case dst.Mode&unix.S_IFMT == unix.S_IFDIR:
			if src.Mode&unix.S_IFMT != unix.S_IFDIR {
				return nil, syscall.EISDIR
			}
			if errno := emptyDir(filepath.Join(np.path(), newName)); errno != 0 {
				return nil, errno
			}
			// A directory cannot be linked aside: move it, for the
			// short while the rename takes.
			op.stash = n.j.stashNameLocked()
			if err := unix.Renameat(nd.fd, newName, n.j.stashFd, op.stash); err != nil {
				return nil, fs.ToErrno(err)
			}
			if err := unix.Renameat(d.fd, name, nd.fd, newName); err != nil {
				unix.Renameat(n.j.stashFd, op.stash, nd.fd, newName)
				return nil, fs.ToErrno(err)
			}
			return op, 0
		default:
			if src.Mode&unix.S_IFMT == unix.S_IFDIR {
				return nil, syscall.ENOTDIR
			}
			// Linked aside first, the replaced file stays whole
			// and the rename atomic.
			op.stash = n.j.stashNameLocked()
			if err := unix.Linkat(nd.fd, newName, n.j.stashFd, op.stash, 0); err != nil {
				return nil, fs.ToErrno(err)
			}
		}
		if err := unix.Renameat2(d.fd, name, nd.fd, newName, uint(flags)); err != nil {
			if op.stash != "" {
				unix.Unlinkat(n.j.stashFd, op.stash, 0)
			}
			return nil, fs.ToErrno(err)
		}
		return op, 0
	})
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, ok := in.GetSize()
	if !ok || n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	return n.j.truncate(n.ino(), n.opener(f), int64(size), func() syscall.Errno {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	})
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (written uint32, errno syscall.Errno) {
	fw, ok := f.(fs.FileWriter)
	if !ok {
		return 0, syscall.EBADF
	}
	h, _ := f.(*handle)
	synced := h != nil && h.synced
	errno = n.j.change(n.ino(), n.opener(f), off, off+int64(len(data)), synced, func() syscall.Errno {
		written, errno = fw.Write(ctx, data, off)
		return errno
	})
	return written, errno
}

// Writev is Write for data in several slices: without it go-fuse would
// answer such a write ENOSYS.
func (n *node) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	return n.Write(ctx, f, bytes.Join(data, nil), off)
}

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	fa, ok := f.(fs.FileAllocater)
	if !ok {
		return syscall.EOPNOTSUPP
	}
	start, end := int64(off), int64(off+size)
	if mode&^unix.FALLOC_FL_KEEP_SIZE == 0 {
		// Plain preallocation changes no byte that was synced.
		start, end = 0, 0
	} else if mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0 {
		end = -1 // everything after off moves
	}
	return n.j.change(n.ino(), n.opener(f), start, end, false, func() syscall.Errno {
		return fa.Allocate(ctx, off, size, mode)
	})
}

// Fsync makes the file's data durable, or, for a directory, its
// entries. fsync and fdatasync both reach the backing directory.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return n.j.syncDir(n.ino(), func() syscall.Errno { return fsyncPath(n.path()) })
	}
	return n.j.syncFile(n.ino(), func() syscall.Errno {
		if fsy, ok := f.(fs.FileFsyncer); ok {
			return fsy.Fsync(ctx, flags)
		}
		return fsyncPath(n.path())
	})
}

func fsyncPath(p string) syscall.Errno {
	f, err := os.Open(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer f.Close()
	return fs.ToErrno(f.Sync())
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, errno := n.Readdir(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	return ds.(*dirHandle), 0, 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.path())
	if errno != 0 {
		return nil, errno
	}
	return &dirHandle{ds: ds, n: n, hide: n.IsRoot()}, 0
}

// A handle is an open backing file that knows whether its writes are
// synced as they are made.
type handle struct {
	loopbackFile
	lf     *fs.LoopbackFile
	synced bool // opened with O_SYNC or O_DSYNC
}

// loopbackFile is what a handle passes on of an fs.LoopbackFile: all
// but PassthroughFd, which would let the kernel read and write the
// backing file without asking, and Writev, which would bypass the
// journal.
type loopbackFile interface {
	fs.FileReleaser
	fs.FileGetattrer
	fs.FileReader
	fs.FileWriter
	fs.FileGetlker
	fs.FileSetlker
	fs.FileSetlkwer
	fs.FileLseeker
	fs.FileFlusher
	fs.FileFsyncer
	fs.FileSetattrer
	fs.FileAllocater
	fs.FileIoctler
	fs.FileStatxer
}

// fd returns the backing file's descriptor, valid while the handle is
// open.
func (h *handle) fd() (int, bool) { return h.lf.PassthroughFd() }

// A dirHandle is an open backing directory whose fsync the journal sees
// and which, at the root, hides the stash.
type dirHandle struct {
	n    *node
	hide bool

	mu      sync.Mutex
	ds      fs.DirStream
	next    *fuse.DirEntry
	nextErr syscall.Errno
}

func (d *dirHandle) fillLocked() {
	for d.next == nil && d.nextErr == 0 && d.ds.HasNext() {
		e, errno := d.ds.Next()
		if errno != 0 {
			d.nextErr = errno
			return
		}
		if d.hide && e.Name == stashName {
			continue
		}
		d.next = &e
	}
}

func (d *dirHandle) HasNext() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fillLocked()
	return d.next != nil || d.nextErr != 0
}

func (d *dirHandle) Next() (fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fillLocked()
	if d.nextErr != 0 {
		errno := d.nextErr
		d.nextErr = 0
		return fuse.DirEntry{}, errno
	}
	if d.next == nil {
		return fuse.DirEntry{}, syscall.ENOENT
	}
	e := *d.next
	d.next = nil
	return e, 0
}

func (d *dirHandle) Close() { d.ds.Close() }

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !d.HasNext() {
		return nil, 0
	}
	e, errno := d.Next()
	if errno != 0 {
		return nil, errno
	}
	return &e, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next, d.nextErr = nil, 0
	if s, ok := d.ds.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) { d.Close() }

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.j.syncDir(d.n.ino(), func() syscall.Errno {
		if s, ok := d.ds.(fs.FileFsyncdirer); ok {
			return s.Fsyncdir(ctx, flags)
		}
		return fsyncPath(d.n.path())
	})
}

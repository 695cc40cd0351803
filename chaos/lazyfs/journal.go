package lazyfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A journal remembers, for one FS, what was not synced: the synced pages
// of the files written since their last sync, and the directory changes
// not yet made durable by an fsync of their directory. Every method
// takes mu; a backing operation that changes what the journal must undo
// runs under mu too, so that a sync cannot slip between the saving of
// the undo information and the change it undoes.
type journal struct {
	backing string
	stash   string // the stash directory's path
	stashFd int    // an O_PATH descriptor of it

	mu        sync.Mutex
	closed    bool
	files     map[uint64]*fileState // by FUSE inode number
	dirs      map[uint64]*dirRef    // by FUSE inode number
	fresh     []*dirRef             // refs opened by the current record call
	ops       []*dirOp              // unsynced directory changes, oldest first
	nextStash uint64
}

// A fileState is what a file was at its last sync. The file's bytes in
// [p*PageSize, min((p+1)*PageSize, size)) are as synced unless pages
// holds p, which then holds those synced bytes; bytes at or beyond size
// were never synced.
type fileState struct {
	f     *os.File // read-write, on the backing inode: it follows renames and unlinks
	size  int64
	pages map[int64][]byte
}

// A dirRef is an open descriptor of a backing directory that unsynced
// changes refer to: it follows the directory through renames, so a cut
// undoes a change where it happened.
type dirRef struct {
	ino  uint64
	fd   int
	refs int
}

type opKind int

const (
	opCreate   opKind = iota // name appeared in dir
	opRemove                 // name left dir, for the stash
	opRename                 // dir/name moved to newDir/newName, replacing what is now in the stash, if anything
	opExchange               // dir/name and newDir/newName swapped
)

type dirOp struct {
	kind    opKind
	dir     *dirRef
	name    string
	newDir  *dirRef
	newName string
	stash   string // a name in the stash, or ""
	isDir   bool   // the created or removed entry is a directory
}

func newJournal(backing, stash string) (*journal, error) {
	fd, err := unix.Open(stash, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open stash: %w", err)
	}
	return &journal{
		backing: backing,
		stash:   stash,
		stashFd: fd,
		files:   make(map[uint64]*fileState),
		dirs:    make(map[uint64]*dirRef),
	}, nil
}

// close forgets everything, keeping the backing directory as it is.
func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.closed = true
	j.forgetLocked()
	unix.Close(j.stashFd)
}

func (j *journal) forgetLocked() {
	for ino, st := range j.files {
		st.f.Close()
		delete(j.files, ino)
	}
	for ino, d := range j.dirs {
		unix.Close(d.fd)
		delete(j.dirs, ino)
	}
	j.ops = nil
}

// An opener opens the backing inode of a file for reading and writing.
type opener func() (*os.File, error)

func (j *journal) fileLocked(ino uint64, open opener) (*fileState, error) {
	if st := j.files[ino]; st != nil {
		return st, nil
	}
	f, err := open()
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st := &fileState{f: f, size: fi.Size(), pages: make(map[int64][]byte)}
	j.files[ino] = st
	return st, nil
}

// save keeps the synced bytes of the pages in [off, end) that are not
// kept yet.
func (st *fileState) save(off, end int64) error {
	for p := off / PageSize; p*PageSize < end && p*PageSize < st.size; p++ {
		if _, ok := st.pages[p]; ok {
			continue
		}
		buf := make([]byte, min(PageSize, st.size-p*PageSize))
		if _, err := st.f.ReadAt(buf, p*PageSize); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("save page %d: %w", p, err)
		}
		st.pages[p] = buf
	}
	return nil
}

// change runs do, which changes the bytes of inode ino in [off, end)
// (end < 0: to the end of the synced data), after saving their synced
// state. If synced, do made the whole file durable (a write through a
// descriptor opened with O_SYNC or O_DSYNC) and the journal forgets it.
func (j *journal) change(ino uint64, open opener, off, end int64, synced bool, do func() syscall.Errno) syscall.Errno {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || (synced && j.files[ino] == nil) {
		return do()
	}
	st, err := j.fileLocked(ino, open)
	if err != nil {
		return errnoOf(err)
	}
	if end < 0 {
		end = st.size
	}
	if err := st.save(off, end); err != nil {
		return errnoOf(err)
	}
	errno := do()
	if errno == 0 && synced {
		st.f.Close()
		delete(j.files, ino)
	}
	return errno
}

// truncate runs do, which sets the size of inode ino to size, after
// saving the synced pages the truncation cuts off.
func (j *journal) truncate(ino uint64, open opener, size int64, do func() syscall.Errno) syscall.Errno {
	return j.change(ino, open, size, -1, false, do)
}

// syncFile runs do, an fsync or fdatasync of inode ino, and forgets
// what it made durable: what the file was when the sync began. Writes
// that run while do does are not covered by it.
func (j *journal) syncFile(ino uint64, do func() syscall.Errno) syscall.Errno {
	j.mu.Lock()
	st := j.files[ino]
	if st == nil || j.closed {
		j.mu.Unlock()
		return do()
	}
	fi, err := st.f.Stat()
	if err != nil {
		j.mu.Unlock()
		return errnoOf(err)
	}
	old, oldSize := st.pages, st.size
	st.pages, st.size = make(map[int64][]byte), fi.Size()
	j.mu.Unlock()

	errno := do()

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.files[ino] != st {
		return errno
	}
	if errno != 0 {
		// Nothing became durable: the older synced state wins.
		for p, b := range old {
			st.pages[p] = b
		}
		st.size = oldSize
		return errno
	}
	if fi, err := st.f.Stat(); err == nil && len(st.pages) == 0 && fi.Size() == st.size {
		st.f.Close()
		delete(j.files, ino)
	}
	return 0
}

// record runs fn, which changes a directory in the backing store and
// returns the change it made, if any, and records that change.
func (j *journal) record(fn func() (*dirOp, syscall.Errno)) syscall.Errno {
	j.mu.Lock()
	defer j.mu.Unlock()
	op, errno := fn()
	if errno == 0 && op != nil && !j.closed {
		op.dir.refs++
		if op.newDir != nil {
			op.newDir.refs++
		}
		j.ops = append(j.ops, op)
	}
	for _, d := range j.fresh {
		j.releaseLocked(d, 0)
	}
	j.fresh = j.fresh[:0]
	return errno
}

// dirLocked returns a reference to the backing directory with FUSE
// inode ino, at path.
func (j *journal) dirLocked(ino uint64, path string) (*dirRef, error) {
	if d := j.dirs[ino]; d != nil {
		return d, nil
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open directory %s: %w", path, err)
	}
	d := &dirRef{ino: ino, fd: fd}
	j.dirs[ino] = d
	j.fresh = append(j.fresh, d)
	return d, nil
}

func (j *journal) releaseLocked(d *dirRef, n int) {
	d.refs -= n
	if d.refs <= 0 && j.dirs[d.ino] == d {
		unix.Close(d.fd)
		delete(j.dirs, d.ino)
	}
}

// stashNameLocked returns a new name for an entry in the stash.
func (j *journal) stashNameLocked() string {
	j.nextStash++
	return strconv.FormatUint(j.nextStash, 10)
}

// covers reports whether an fsync of the directory with FUSE inode ino
// makes op durable. A rename or exchange is durable once its new
// directory is synced: that is what a program that renames is told to
// sync.
func (op *dirOp) coveredBy(ino uint64) bool {
	if op.kind == opRename || op.kind == opExchange {
		return op.newDir.ino == ino
	}
	return op.dir.ino == ino
}

// syncDir runs do, an fsync of the directory with FUSE inode ino, and
// forgets the changes to it recorded before do began, deleting for good
// what they removed.
func (j *journal) syncDir(ino uint64, do func() syscall.Errno) syscall.Errno {
	j.mu.Lock()
	var covered []*dirOp
	for _, op := range j.ops {
		if op.coveredBy(ino) {
			covered = append(covered, op)
		}
	}
	j.mu.Unlock()

	errno := do()
	if errno != 0 || len(covered) == 0 {
		return errno
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return 0
	}
	j.ops = slices.DeleteFunc(j.ops, func(op *dirOp) bool {
		return slices.Contains(covered, op)
	})
	for _, op := range covered {
		if op.stash != "" {
			j.purgeLocked(op.stash)
		}
		j.releaseLocked(op.dir, 1)
		if op.newDir != nil {
			j.releaseLocked(op.newDir, 1)
		}
	}
	return 0
}

// purgeLocked deletes an entry of the stash for good.
func (j *journal) purgeLocked(name string) {
	if err := unix.Unlinkat(j.stashFd, name, 0); err == nil || errors.Is(err, unix.ENOENT) {
		return
	}
	os.RemoveAll(filepath.Join(j.stash, name))
}

// fdPath returns the path, relative to the backing directory, at which
// descriptor fd is open.
func (j *journal) fdPath(fd int) string {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Sprintf("fd %d", fd)
	}
	if rel, err := filepath.Rel(j.backing, p); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return p
}

func (j *journal) entryPath(d *dirRef, name string) string {
	return filepath.Join(j.fdPath(d.fd), name)
}

// cut rolls the backing directory back to what was synced (see
// FS.Cut), adding what it did to rep, and forgets everything. n numbers
// the cut, so that each cut of an FS makes its own torn choices.
func (j *journal) cut(mode CutMode, seed, n uint64, rep *CutReport) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	rng := rand.New(rand.NewPCG(seed, n))

	type file struct {
		path string
		st   *fileState
	}
	var files []file
	for _, st := range j.files {
		files = append(files, file{j.fdPath(int(st.f.Fd())), st})
	}
	// The torn choices follow the files' names, not the map's order,
	// so that the same seed makes the same choices.
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.path, b.path) })
	var errs []error
	for _, f := range files {
		if err := rollBack(f.path, f.st, mode, rng, rep); err != nil {
			errs = append(errs, err)
		}
	}

	// Undo the directory changes newest first, so that each finds the
	// directory as it was just after it.
	for i := len(j.ops) - 1; i >= 0; i-- {
		op := j.ops[i]
		what, err := j.undoLocked(op)
		if err != nil {
			// A later change that was synced can stand in the way
			// (a name it created, a directory it removed): the
			// disk keeps both, as a real one could.
			rep.Lines = append(rep.Lines, fmt.Sprintf("kept %s: %v", what, err))
			continue
		}
		rep.EntriesUndone++
		rep.Lines = append(rep.Lines, "undone "+what)
	}

	// What is left in the stash was removed by changes that could not
	// be undone: they stay removed.
	if ents, err := os.ReadDir(j.stash); err == nil {
		for _, e := range ents {
			j.purgeLocked(e.Name())
		}
	}
	for _, f := range files {
		f.st.f.Close()
	}
	clear(j.files)
	for ino, d := range j.dirs {
		unix.Close(d.fd)
		delete(j.dirs, ino)
	}
	j.ops = nil
	return errors.Join(errs...)
}

// rollBack restores the synced state of one file, or with CutTorn a
// page-aligned prefix of its unsynced writes.
func rollBack(path string, st *fileState, mode CutMode, rng *rand.Rand, rep *CutReport) error {
	fi, err := st.f.Stat()
	if err != nil {
		return fmt.Errorf("roll back %s: %w", path, err)
	}
	cur := fi.Size()
	// The dirty pages are those saved and those past the synced size.
	dirty := slices.Sorted(func(yield func(int64) bool) {
		for p := range st.pages {
			if !yield(p) {
				return
			}
		}
	})
	appendFrom, appendTo := pages(st.size), pages(cur)
	lo, hi := int64(-1), int64(-1)
	if appendTo > appendFrom {
		lo, hi = appendFrom, appendTo
	}
	if len(dirty) > 0 {
		first, last := dirty[0], dirty[len(dirty)-1]+1
		if lo < 0 {
			lo, hi = first, last
		} else {
			lo, hi = min(lo, first), max(hi, last)
		}
	}

	// Pages before b keep what was written; pages from b on go back to
	// what was synced.
	b := int64(0)
	if mode == CutTorn && hi > lo {
		b = lo + rng.Int64N(hi-lo+1)
	}
	boundary := b * PageSize

	var dropped, kept int64
	count := func(p, n int64) {
		if p < b {
			kept += n
		} else {
			dropped += n
		}
	}
	buf := make([]byte, PageSize)
	for _, p := range dirty {
		// Count the bytes that differ from the synced ones, so that
		// a page partly synced counts only what was not.
		n, err := st.f.ReadAt(buf[:min(max(cur-p*PageSize, 0), PageSize)], p*PageSize)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("roll back %s: page %d: %w", path, p, err)
		}
		count(p, changed(buf[:n], st.pages[p]))
	}
	for p := appendFrom; p < appendTo; p++ {
		count(p, min(cur-p*PageSize, PageSize))
	}

	for _, p := range dirty {
		if p < b {
			continue
		}
		if _, err := st.f.WriteAt(st.pages[p], p*PageSize); err != nil {
			return fmt.Errorf("roll back %s: page %d: %w", path, p, err)
		}
	}
	size := st.size
	if size <= boundary {
		size = min(cur, boundary)
	}
	if err := st.f.Truncate(size); err != nil {
		return fmt.Errorf("roll back %s: %w", path, err)
	}
	if dropped == 0 && kept == 0 && size == cur {
		return nil
	}
	rep.Files++
	rep.BytesDropped += dropped
	rep.BytesKept += kept
	rep.Lines = append(rep.Lines, fmt.Sprintf("%s %s: size %d -> %d (synced %d), unsynced bytes dropped %d, kept %d",
		mode, path, cur, size, st.size, dropped, kept))
	return nil
}

// changed returns the number of bytes in which cur, a page now, differs
// from synced, the same page when it was synced.
func changed(cur, synced []byte) int64 {
	n := int64(max(len(cur), len(synced)) - min(len(cur), len(synced)))
	for i := range min(len(cur), len(synced)) {
		if cur[i] != synced[i] {
			n++
		}
	}
	return n
}

// pages returns the number of pages that size bytes occupy.
func pages(size int64) int64 { return (size + PageSize - 1) / PageSize }

// undoLocked undoes one directory change and describes it.
func (j *journal) undoLocked(op *dirOp) (string, error) {
	old := j.entryPath(op.dir, op.name)
	switch op.kind {
	case opCreate:
		what := "create " + old
		if !op.isDir {
			return what, unix.Unlinkat(op.dir.fd, op.name, 0)
		}
		// Whatever the directory holds goes with it.
		s := j.stashNameLocked()
		if err := unix.Renameat(op.dir.fd, op.name, j.stashFd, s); err != nil {
			return what, err
		}
		j.purgeLocked(s)
		return what, nil
	case opRemove:
		return "remove " + old, unix.Renameat2(j.stashFd, op.stash, op.dir.fd, op.name, unix.RENAME_NOREPLACE)
	case opRename:
		what := "rename " + old + " -> " + j.entryPath(op.newDir, op.newName)
		if err := unix.Renameat2(op.newDir.fd, op.newName, op.dir.fd, op.name, unix.RENAME_NOREPLACE); err != nil {
			return what, err
		}
		if op.stash == "" {
			return what, nil
		}
		return what, unix.Renameat2(j.stashFd, op.stash, op.newDir.fd, op.newName, unix.RENAME_NOREPLACE)
	case opExchange:
		return "exchange " + old + " <-> " + j.entryPath(op.newDir, op.newName),
			unix.Renameat2(op.dir.fd, op.name, op.newDir.fd, op.newName, unix.RENAME_EXCHANGE)
	}
	return "", fmt.Errorf("unknown change %d", op.kind)
}

// errnoOf returns the errno in err, or EIO.
func errnoOf(err error) syscall.Errno {
	if errno, ok := errors.AsType[syscall.Errno](err); ok {
		return errno
	}
	return syscall.EIO
}

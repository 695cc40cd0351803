package logstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Snapshot data lives in files of its own, in the store's snap/ folder,
// not in pebble: a million locks are hundreds of megabytes, and one such
// value in pebble's write-ahead log would hold every Ready's synced commit
// behind it for as long as it takes to write (the member then misses its
// heartbeats and loses its leadership). Pebble keeps the snapshot's
// metadata with a reference to the file in place of the data:
//
//	snapRefMagic, uvarint name length, file name, SHA-256 of the data
//
// A file is written, synced and renamed into place before the reference
// to it commits, and the file it replaces is removed only after, so a
// crash at any point leaves the reference naming a whole file; files no
// reference names (a crash between the two) are removed when the store
// opens.
const (
	snapDir      = "snap"
	snapRefMagic = "RLSF\x01"
	snapSuffix   = ".snap"
	// snapSyncEvery bounds the unsynced bytes of a snapshot file being
	// written, so no sync of it is long and the member's own log syncs
	// never queue behind megabytes of dirty pages. (At 16 MiB, three
	// members writing a million locks' snapshots at once stalled their
	// log syncs for tens of milliseconds each time.)
	snapSyncEvery = 1 << 20
	// MaxSnapshotRate is the fastest a member writes a snapshot of its own
	// table, in bytes per second: written as fast as it encodes, a table
	// of a million locks saturated the disk its log syncs on for seconds.
	// A snapshot received from the leader is not paced (the member waits
	// for it).
	MaxSnapshotRate = 64 << 20
	// snapPaceSlack is how far ahead of its rate a paced writer may get
	// before it sleeps: a snapshot smaller than this is never slowed.
	snapPaceSlack = 10 * time.Millisecond
)

// snapFiles writes and reads a store's snapshot files.
type snapFiles struct {
	fs  vfs.FS
	dir string
}

func (f snapFiles) path(name string) string { return f.fs.PathJoin(f.dir, name) }

// isRef says whether stored snapshot data is a reference to a file.
func isRef(data []byte) bool { return bytes.HasPrefix(data, []byte(snapRefMagic)) }

func encodeRef(name string, sum [sha256.Size]byte) []byte {
	b := append([]byte(snapRefMagic), binary.AppendUvarint(nil, uint64(len(name)))...)
	b = append(b, name...)
	return append(b, sum[:]...)
}

func decodeRef(ref []byte) (name string, sum [sha256.Size]byte, err error) {
	rest := ref[len(snapRefMagic):]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > 255 || uint64(len(rest)-k) != n+sha256.Size {
		return "", sum, errors.New("malformed snapshot file reference")
	}
	name = string(rest[k : k+int(n)])
	if strings.ContainsAny(name, `/\`) || !strings.HasSuffix(name, snapSuffix) {
		return "", sum, fmt.Errorf("snapshot file reference names %q", name)
	}
	copy(sum[:], rest[k+int(n):])
	return name, sum, nil
}

// write stores data in a new file named for index and seq, synced and in
// place, and returns its name and reference: a snapshot received whole.
func (f snapFiles) write(index, seq uint64, data []byte) (name string, ref []byte, err error) {
	name = fmt.Sprintf("%020d-%d%s", index, seq, snapSuffix)
	write := func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
	if err := f.writeFile(context.Background(), name, 0, write, io.Discard); err != nil {
		return "", nil, err
	}
	return name, encodeRef(name, sha256.Sum256(data)), nil
}

// writeFile writes the file name with the bytes produce streams, which
// never holds them whole, paced to rate bytes per second (0: as fast as
// they come), and copies them to also (a hash). The file is synced and
// renamed into place, its folder synced. When ctx ends first the file is
// removed and ctx's error returned: nothing of it was ever referenced.
func (f snapFiles) writeFile(ctx context.Context, name string, rate int64, produce func(io.Writer) error, also io.Writer) error {
	if err := f.ensureDir(); err != nil {
		return err
	}
	tmp := f.path(name + ".tmp")
	file, err := f.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create snapshot file: %w", err)
	}
	sw := &syncingWriter{ctx: ctx, f: file, buf: make([]byte, 0, 256<<10), rate: rate, start: time.Now()}
	werr := produce(io.MultiWriter(sw, also))
	if werr == nil {
		werr = sw.flush(true)
	}
	if cerr := file.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = f.fs.Rename(tmp, f.path(name))
	}
	if werr == nil {
		werr = f.syncDir()
	}
	if werr != nil {
		f.fs.Remove(tmp)
		f.fs.Remove(f.path(name))
		return fmt.Errorf("write snapshot file %s: %w", name, werr)
	}
	return nil
}

// syncingWriter writes to a snapshot file through a buffer of its own (a
// vfs.File may scribble on what it is given to write: pebble's do, in
// their invariants builds, and the caller's bytes may be raft's) and syncs
// every snapSyncEvery bytes, so no sync is long and the member's own
// commits never queue behind megabytes of dirty pages. With a rate, it
// sleeps whenever it is more than snapPaceSlack ahead of it. Once ctx has
// ended every write fails with ctx's error.
type syncingWriter struct {
	ctx      context.Context
	f        vfs.File
	buf      []byte
	unsynced int
	rate     int64 // bytes per second; 0: unpaced
	start    time.Time
	written  int64
}

func (w *syncingWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(false); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush writes the buffer out, syncing when asked or when enough is
// unsynced.
func (w *syncingWriter) flush(sync bool) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if len(w.buf) > 0 {
		if _, err := w.f.Write(w.buf); err != nil {
			return err
		}
		w.unsynced += len(w.buf)
		w.written += int64(len(w.buf))
		w.buf = w.buf[:0]
	}
	if sync || w.unsynced >= snapSyncEvery {
		w.unsynced = 0
		if err := w.f.Sync(); err != nil {
			return err
		}
	}
	if w.rate > 0 {
		due := w.start.Add(time.Duration(float64(w.written) / float64(w.rate) * float64(time.Second)))
		if ahead := time.Until(due); ahead > snapPaceSlack {
			t := time.NewTimer(ahead)
			defer t.Stop()
			select {
			case <-t.C:
			case <-w.ctx.Done():
				return w.ctx.Err()
			}
		}
	}
	return nil
}

// ensureDir creates the folder, durably: its parent's entry for it is
// synced too, or a power cut could lose the folder under a synced file.
func (f snapFiles) ensureDir() error {
	if _, err := f.fs.Stat(f.dir); err == nil {
		return nil
	}
	if err := f.fs.MkdirAll(f.dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", f.dir, err)
	}
	if err := syncDir(f.fs, f.fs.PathDir(f.dir)); err != nil {
		return fmt.Errorf("sync the parent of %s: %w", f.dir, err)
	}
	return nil
}

func (f snapFiles) syncDir() error { return syncDir(f.fs, f.dir) }

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// read returns the data a one-file reference names, checked against its
// SHA-256.
func (f snapFiles) read(ref []byte) ([]byte, error) {
	name, sum, err := decodeRef(ref)
	if err != nil {
		return nil, err
	}
	data, err := f.readFile(name)
	if err != nil {
		return nil, err
	}
	if sha256.Sum256(data) != sum {
		return nil, &SnapshotFileError{Files: snapDir + "/" + name, Err: fmt.Errorf("snapshot file %s does not match its SHA-256 (%d bytes)", name, len(data))}
	}
	return data, nil
}

func (f snapFiles) readFile(name string) ([]byte, error) {
	file, err := f.fs.Open(f.path(name))
	if err != nil {
		return nil, fmt.Errorf("open snapshot file: %w", err)
	}
	defer file.Close()
	data, err := io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("read snapshot file %s: %w", name, err)
	}
	return data, nil
}

// SnapshotFileError is snapshot data whose files do not match their
// reference (their size or SHA-256): damaged on disk. Files names them,
// relative to the data directory.
type SnapshotFileError struct {
	Files string
	Err   error
}

func (e *SnapshotFileError) Error() string { return e.Err.Error() }
func (e *SnapshotFileError) Unwrap() error { return e.Err }

// SnapshotData returns the data of a snapshot read from this store's
// raft.Storage: the store keeps only a reference to its file in memory,
// and this reads the file (checked against its SHA-256). Data that is not
// a reference (the seed, a store from before the files) is returned as
// it is.
func (s *Disk) SnapshotData(stored []byte) ([]byte, error) {
	if !isStoredRef(stored) {
		return stored, nil
	}
	c, err := parseRef(stored)
	if err != nil {
		return nil, err
	}
	return s.files.readChain(c)
}

// OpenSnapshot opens the data a stored snapshot's reference names, for
// streaming it to a follower without holding it in memory: its size and
// SHA-256 come with it. ok is false for data that is not a reference.
func (s *Disk) OpenSnapshot(stored []byte) (r io.ReadCloser, size int64, sum [sha256.Size]byte, ok bool, err error) {
	if !isStoredRef(stored) {
		return nil, 0, sum, false, nil
	}
	c, err := parseRef(stored)
	if err != nil {
		return nil, 0, sum, true, err
	}
	r, size, err = s.files.openChain(c)
	return r, size, c.sum, true, err
}

// removeExcept removes every snapshot file but keep's, and leftovers of
// interrupted writes.
func (f snapFiles) removeExcept(keep chain) error {
	names, err := f.fs.List(f.dir)
	if err != nil {
		return nil // no folder: nothing to remove
	}
	for _, n := range names {
		if !keep.has(n) && (strings.HasSuffix(n, snapSuffix) || strings.HasSuffix(n, snapSuffix+".tmp")) {
			if err := f.fs.Remove(f.path(n)); err != nil {
				return fmt.Errorf("remove stale snapshot file %s: %w", n, err)
			}
		}
	}
	return nil
}

func (f snapFiles) remove(name string) {
	if name != "" {
		f.fs.Remove(f.path(name))
	}
}

// removeReplaced removes the files of old that next does not keep.
func (f snapFiles) removeReplaced(old, next chain) {
	for _, p := range old.parts {
		if !next.has(p.name) {
			f.remove(p.name)
		}
	}
}

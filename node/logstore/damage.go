package logstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A member whose data was damaged on disk (a flipped bit, a truncated
// file) must either recover from its own checksums and its peers, or
// refuse to start with one line naming the file: it never serves, votes
// or answers with data it does not have. What the store detects, and
// what it cannot:
//
//   - A write-ahead log record that fails its checksum, with records synced
//     after it (pebble's WAL sync chunks, FormatWALSyncChunks, carry in
//     each chunk the offset the log was synced to when it was written):
//     corruption, not a torn write. checkWALs finds it before pebble opens
//     and refuses, naming the file and offset; pebble would refuse too
//     (ErrCorruption), without the name. Before this format (pebble's
//     default, FormatMinSupported) pebble took any invalid chunk in the
//     last log for its end and dropped every record after it, synced
//     raft entries and hard states included, silently: a member could
//     come back with a shorter log and an older vote, and vote twice in
//     one term.
//   - A record that fails its checksum with nothing synced after it looks
//     exactly like a write torn by a power cut, and is dropped as one
//     (pebble's recovery). After a clean stop the seal (below) catches it:
//     the log then holds less than the member had when it stopped. After
//     a crash nothing can tell it from a torn write, and dropping it is
//     what raft expects of an unsynced tail (nothing acknowledged rested
//     on it only if it was never synced: a flip in a synced last record
//     after a crash is the one damage this store cannot see).
//   - A truncated log, sstable or MANIFEST after a clean stop: the seal.
//     At a graceful Close the store syncs pebble's WAL, then writes and
//     syncs a small file (sealName) holding its last index, hard state
//     and snapshot index, with a CRC; at the next open, once every check
//     passed, it is removed (durably) before anything new is written. An
//     open that finds less than the seal says refuses, naming the log's
//     files.
//   - A damaged sstable, MANIFEST, OPTIONS or CURRENT: pebble's own
//     checksums and parsers refuse it, and the store names it in one
//     line; a panic of pebble's while opening (its Fatalf, or a bug on
//     bad input) is recovered at the open and refused likewise.
//   - A damaged snapshot file: its SHA-256 (in the reference pebble holds)
//     does not match when the member restores it at start (member.New
//     reads it through SnapshotData), and the member refuses naming it.
//     It does not fetch a new snapshot from the leader: a member that
//     refuses is replaced by its operator (the chaos harness removes it
//     and adds a fresh member, which catches up by snapshot).
//
// The planted bug damaged-log-trusted (Options.UnsafeTrustDamagedLog)
// skips both the scan and the seal: a log whose checksum fails is cut
// where it fails, as pebble before its sync chunks did, and the member
// starts over what is left.

// sealName is the clean-stop seal's file, in the data directory.
const sealName = "raftlock-clean-stop"

// sealMagic begins a seal of the format's first version (no file
// numbers); sealMagic2 one of the second, which records the highest
// write-ahead log and MANIFEST numbers at the clean stop.
const (
	sealMagic  = "RLCS\x01"
	sealMagic2 = "RLCS\x02"
)

// DamagedError is a store that refuses to open because its data is
// damaged: File names the file (relative to the data directory) when the
// damage is known to be in one, and Err says what was found.
type DamagedError struct {
	Dir  string
	File string
	Err  error
	// Running: found while the store ran (pebble read a damaged block),
	// not when it opened; every write after it fails with it.
	Running bool
}

func (e *DamagedError) Error() string {
	refusing := "refusing to start"
	if e.Running {
		refusing = "refusing to go on"
	}
	// One line: pebble's corruption errors may carry a detail on a line
	// of their own.
	why, _, _ := strings.Cut(fmt.Sprint(e.Err), "\n")
	if e.File == "" {
		return fmt.Sprintf("%s: the data in %s is damaged: %s", refusing, e.Dir, why)
	}
	return fmt.Sprintf("%s: %s in %s is damaged: %s", refusing, e.File, e.Dir, why)
}

func (e *DamagedError) Unwrap() error { return e.Err }

// walDamage is what a scan of one write-ahead log found: the offset of
// its first invalid chunk, and whether records synced after it make that
// corruption (true) or it is the log's torn tail (false).
type walDamage struct {
	file      string
	offset    int64
	corrupt   bool
	err       error
	truncated bool // cut at offset (the planted bug)
}

// isWAL says whether name is a pebble write-ahead log, and its number.
func isWAL(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, ".log")
	if !ok {
		return 0, false
	}
	base, _, _ = strings.Cut(base, "-") // a failover segment: NUM-SEQ.log
	n, err := strconv.ParseUint(base, 10, 64)
	return n, err == nil
}

// newRecordReader is record.NewReader with a log number given as a
// uint64: the type it takes is internal to pebble, inferred here.
func newRecordReader[T ~uint64](newReader func(io.Reader, T) *record.Reader, r io.Reader, num uint64) *record.Reader {
	return newReader(r, T(num))
}

// scanWAL reads every record of the log name in dir, as pebble's replay
// does, and says where it stops if not at a clean end.
func scanWAL(fs vfs.FS, dir, name string) (*walDamage, error) {
	num, _ := isWAL(name)
	f, err := fs.Open(fs.PathJoin(dir, name))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	rr := newRecordReader(record.NewReader, f, num)
	for {
		off := rr.Offset()
		r, err := rr.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
			return nil, nil
		case errors.Is(err, record.ErrUnexpectedEOF):
			// An invalid chunk and no record synced after it: a torn
			// tail, which pebble drops (nothing synced was in it).
			return &walDamage{file: name, offset: off, err: err}, nil
		case errors.Is(err, record.ErrInvalidChunk), errors.Is(err, record.ErrZeroedChunk):
			return &walDamage{file: name, offset: off, corrupt: true, err: err}, nil
		default:
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
	}
}

// checkWALs scans every write-ahead log in dir that pebble will replay
// before pebble opens them (the caller holds pebble's directory lock, so
// no live pebble is writing them). A log corrupt in its middle is refused
// (nil torn, a *DamagedError); with trust (the planted bug) it is cut at
// the damage instead, as a torn tail. torn lists the logs that end in a
// torn write, which pebble drops. An error reading a log (the file
// system, not its contents) is returned as it is.
//
// Logs numbered below the MANIFEST's minimum unflushed log number are
// skipped: everything in them is in sstables already, pebble never
// replays them (it keeps some to recycle, or has not deleted them yet),
// and damage in them harms nothing. When the MANIFEST cannot be read
// here every log is scanned, as before; pebble then names the MANIFEST's
// own damage when it opens.
func checkWALs(fs vfs.FS, dir string, trust bool) (torn []walDamage, err error) {
	minLog, _ := minUnflushedLog(fs, dir)
	names, err := fs.List(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	slices.Sort(names)
	for _, name := range names {
		num, ok := isWAL(name)
		if !ok || num < minLog {
			continue
		}
		d, err := scanWAL(fs, dir, name)
		if err != nil {
			return nil, fmt.Errorf("scan the write-ahead logs in %s: %w", dir, err)
		}
		if d == nil {
			continue
		}
		if d.corrupt && !trust {
			return nil, &DamagedError{Dir: dir, File: name, Err: fmt.Errorf(
				"write-ahead log record at offset %d fails its checksum and records synced after it follow (%v)", d.offset, d.err)}
		}
		if d.corrupt {
			if err := truncateFile(fs, fs.PathJoin(dir, name), d.offset); err != nil {
				return nil, err
			}
			d.truncated = true
		}
		torn = append(torn, *d)
	}
	return torn, nil
}

// truncateFile cuts path at size, durably.
func truncateFile(fs vfs.FS, path string, size int64) error {
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if t, ok := f.(interface{ Truncate(int64) error }); ok {
		if err := t.Truncate(size); err != nil {
			return fmt.Errorf("truncate %s: %w", path, err)
		}
		return f.Sync()
	}
	// A file system without truncation: rewrite the prefix.
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	f.Close()
	nf, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	defer nf.Close()
	if _, err := nf.Write(data); err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	return nf.Sync()
}

// seal is what a cleanly stopped store held: the next open must find at
// least as much.
//
// walNum and manifestNum are the highest write-ahead log and MANIFEST
// numbers in the directory when the seal was written (zero: unknown, a
// seal of the first format). Every pebble open starts a new log and a
// new MANIFEST, so a higher one at the next open means another program
// (an older build that ignores the seal, after a rollback) opened and
// wrote the store since: the seal no longer says what it holds.
type seal struct {
	lastIndex, snapIndex uint64
	term, vote, commit   uint64
	walNum, manifestNum  uint64
}

func (s seal) encode() []byte {
	b := []byte(sealMagic2)
	for _, v := range []uint64{s.lastIndex, s.snapIndex, s.term, s.vote, s.commit, s.walNum, s.manifestNum} {
		b = binary.AppendUvarint(b, v)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

func decodeSeal(b []byte) (seal, error) {
	n := 0
	switch {
	case len(b) < len(sealMagic)+4:
		return seal{}, errors.New("not a clean-stop seal")
	case bytes.HasPrefix(b, []byte(sealMagic)):
		n = 5
	case bytes.HasPrefix(b, []byte(sealMagic2)):
		n = 7
	default:
		return seal{}, errors.New("not a clean-stop seal")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)) != sum {
		return seal{}, errors.New("the seal fails its checksum")
	}
	rest := body[len(sealMagic):]
	var vs [7]uint64
	for i := range vs[:n] {
		v, k := binary.Uvarint(rest)
		if k <= 0 {
			return seal{}, errors.New("the seal is cut short")
		}
		vs[i], rest = v, rest[k:]
	}
	if len(rest) != 0 {
		return seal{}, errors.New("the seal has trailing bytes")
	}
	return seal{lastIndex: vs[0], snapIndex: vs[1], term: vs[2], vote: vs[3], commit: vs[4], walNum: vs[5], manifestNum: vs[6]}, nil
}

// staleSeal says whether dir holds a write-ahead log or MANIFEST numbered
// above the ones s names: another program opened the store after its
// clean stop.
func staleSeal(fs vfs.FS, dir string, s seal) bool {
	if s.walNum == 0 && s.manifestNum == 0 {
		return false // a seal of the first format: nothing to tell by
	}
	wal, manifest := fileNums(fs, dir)
	return wal > s.walNum || manifest > s.manifestNum
}

// fileNums is the highest write-ahead log and MANIFEST numbers in dir.
func fileNums(fs vfs.FS, dir string) (wal, manifest uint64) {
	names, _ := fs.List(dir)
	for _, n := range names {
		if num, ok := isWAL(n); ok {
			wal = max(wal, num)
		}
		if rest, ok := strings.CutPrefix(n, "MANIFEST-"); ok {
			if num, err := strconv.ParseUint(rest, 10, 64); err == nil {
				manifest = max(manifest, num)
			}
		}
	}
	return wal, manifest
}

// minUnflushedLog reads pebble's current MANIFEST for its minimum
// unflushed log number: logs below it are flushed and never replayed.
// ok is false when it cannot tell. It reads only the first fields of each
// version edit (the comparator's name, then the log number, which pebble
// writes before any other), so it depends on no pebble internals.
func minUnflushedLog(fs vfs.FS, dir string) (num uint64, ok bool) {
	desc, err := pebble.Peek(dir, fs)
	if err != nil || !desc.Exists || desc.ManifestFilename == "" {
		return 0, false
	}
	f, err := fs.Open(desc.ManifestFilename)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	rr := newRecordReader(record.NewReader, f, 0)
	for {
		r, err := rr.Next()
		if errors.Is(err, io.EOF) {
			return num, num > 0
		}
		if err != nil {
			return 0, false
		}
		edit, err := io.ReadAll(io.LimitReader(r, 1<<20))
		if err != nil {
			return 0, false
		}
		if n, found := editLogNumber(edit); found {
			num = max(num, n)
		}
	}
}

// editLogNumber finds the log number in one encoded version edit, if it
// sets one: tag 1 (the comparator, a length-prefixed string) may come
// first, then tag 2 (the log number, a uvarint).
func editLogNumber(b []byte) (uint64, bool) {
	tag, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, false
	}
	b = b[k:]
	if tag == 1 {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return 0, false
		}
		b = b[k+int(l):]
		if tag, k = binary.Uvarint(b); k <= 0 {
			return 0, false
		}
		b = b[k:]
	}
	if tag != 2 {
		return 0, false
	}
	n, k := binary.Uvarint(b)
	return n, k > 0
}

// readSeal reads the seal in dir; ok false when there is none. A seal
// that does not decode is a *DamagedError; one that cannot be read (the
// file system failed) is that error, as it is.
func readSeal(fs vfs.FS, dir string) (s seal, ok bool, err error) {
	f, err := fs.Open(fs.PathJoin(dir, sealName))
	if errors.Is(err, os.ErrNotExist) {
		return seal{}, false, nil
	}
	if err != nil {
		return seal{}, false, fmt.Errorf("read the clean-stop seal: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return seal{}, false, fmt.Errorf("read the clean-stop seal: %w", err)
	}
	if s, err = decodeSeal(b); err != nil {
		return seal{}, false, &DamagedError{Dir: dir, File: sealName, Err: err}
	}
	return s, true, nil
}

// writeSeal writes the seal, synced, and its directory entry, synced.
func writeSeal(fs vfs.FS, dir string, s seal) error {
	tmp := fs.PathJoin(dir, sealName+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write(s.encode()); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, fs.PathJoin(dir, sealName)); err != nil {
		return err
	}
	return syncDir(fs, dir)
}

// removeSeal removes the seal durably: once the store writes again, what
// the seal says is no longer what a crash would leave.
func removeSeal(fs vfs.FS, dir string) error {
	if err := fs.Remove(fs.PathJoin(dir, sealName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(fs, dir)
}

// sealNow is the seal of what the store holds now (its mirror holds
// exactly what pebble committed).
func (s *Disk) sealNow() (seal, error) {
	last, err := s.MemoryStorage.LastIndex()
	if err != nil {
		return seal{}, err
	}
	hs, _, err := s.MemoryStorage.InitialState()
	if err != nil {
		return seal{}, err
	}
	snap, err := s.MemoryStorage.Snapshot()
	if err != nil {
		return seal{}, err
	}
	return seal{lastIndex: last, snapIndex: snap.GetMetadata().GetIndex(), term: hs.GetTerm(), vote: hs.GetVote(), commit: hs.GetCommit()}, nil
}

// sameData says whether two seals say the same of the store's data (not
// of its files).
func (s seal) sameData(o seal) bool {
	s.walNum, s.manifestNum, o.walNum, o.manifestNum = 0, 0, 0, 0
	return s == o
}

// checkSeal compares what the store loaded with the seal of its last
// clean stop: any difference is data lost (or changed) while it was
// stopped.
func (s *Disk) checkSeal(dir string, want seal, walFiles []string) error {
	got, err := s.sealNow()
	if err != nil {
		return err
	}
	if got.sameData(want) {
		return nil
	}
	// The log, or the MANIFEST that says which sstables hold the rest.
	file := strings.Join(append(slices.Clone(walFiles), manifestNames(s.fs, dir)...), ", ")
	return &DamagedError{Dir: dir, File: file, Err: fmt.Errorf(
		"the store stopped cleanly holding last index %d, snapshot %d, term %d, vote %d, commit %d, and now holds last index %d, snapshot %d, term %d, vote %d, commit %d: its log, sstables or MANIFEST were truncated or damaged",
		want.lastIndex, want.snapIndex, want.term, want.vote, want.commit, got.lastIndex, got.snapIndex, got.term, got.vote, got.commit)}
}

// walNames lists the write-ahead logs in dir (for messages).
func walNames(fs vfs.FS, dir string) []string {
	names, _ := fs.List(dir)
	var out []string
	for _, n := range names {
		if _, ok := isWAL(n); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// openPebble opens pebble, turning a panic on damaged data into an
// error, and naming a corrupt file in a refusal.
func openPebble(dir string, opts *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, &DamagedError{Dir: dir, Err: fmt.Errorf("pebble failed opening it: %v", r)}
		}
	}()
	if name, err := checkOptionsFile(opts.FS, dir); err != nil {
		return nil, &DamagedError{Dir: dir, File: name, Err: err}
	}
	db, err = pebble.Open(dir, opts)
	if err != nil && looksDamaged(err) {
		// pebble's message names the file (a malformed MANIFEST, an
		// sstable whose size the MANIFEST contradicts).
		return nil, &DamagedError{Dir: dir, Err: fmt.Errorf("pebble cannot open it: %w", err)}
	}
	return db, err
}

// looksDamaged says whether pebble's open failed on what it read, rather
// than on the file system (permissions, a lock held, a disk error): its
// corruption errors, its malformed MANIFEST (a corruption error too,
// matched by its text in case a wrapping loses the mark), and its check
// that each sstable has the size the MANIFEST records (a truncated
// sstable; pebble does not mark it as corruption). Only these exact
// messages: a word like "MANIFEST" also appears in its I/O errors.
func looksDamaged(err error) bool {
	msg := err.Error()
	return pebble.IsCorruptionError(err) ||
		strings.Contains(msg, "pebble: malformed manifest file") ||
		(strings.Contains(msg, ": object size mismatch (") && strings.Contains(msg, "(disk) != "))
}

// checkOptionsFile parses the newest OPTIONS file in dir as pebble will:
// a damaged one fails there with a message that does not name it.
func checkOptionsFile(fs vfs.FS, dir string) (string, error) {
	names, err := fs.List(dir)
	if err != nil {
		return "", nil // no directory yet
	}
	newest := ""
	for _, n := range names {
		if strings.HasPrefix(n, "OPTIONS-") && !strings.HasSuffix(n, ".dbtmp") && n > newest {
			newest = n
		}
	}
	if newest == "" {
		return "", nil
	}
	f, err := fs.Open(fs.PathJoin(dir, newest))
	if err != nil {
		return newest, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return newest, err
	}
	if err := new(pebble.Options).Parse(string(b), nil); err != nil {
		return newest, fmt.Errorf("pebble's options file does not parse: %w", err)
	}
	return "", nil
}

// formatBefore is the format version of the store in dir, read from
// pebble's marker file name (marker.format-version.SEQ.VERSION); zero
// for a store without one (a fresh directory).
func formatBefore(fs vfs.FS, dir string) pebble.FormatMajorVersion {
	names, _ := fs.List(dir)
	var v uint64
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, "marker.format-version.")
		if !ok {
			continue
		}
		_, ver, _ := strings.Cut(rest, ".")
		if x, err := strconv.ParseUint(ver, 10, 32); err == nil && x > v {
			v = x
		}
	}
	return pebble.FormatMajorVersion(v)
}

// manifestNames lists pebble's MANIFEST files in dir (for messages).
func manifestNames(fs vfs.FS, dir string) []string {
	names, _ := fs.List(dir)
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, "MANIFEST-") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return []string{"its MANIFEST"}
	}
	return out
}

// pebbleFileRe finds the file number in pebble's corruption messages
// ("pebble: file 000010: block 0/457: ...").
var pebbleFileRe = regexp.MustCompile(`file (\d{6,})`)

// corruptFile names the file a pebble error is about, when its message
// names one that is in dir ("" if not).
func corruptFile(fs vfs.FS, dir string, err error) string {
	m := pebbleFileRe.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	for _, ext := range []string{".sst", ".blob"} {
		if _, err := fs.Stat(fs.PathJoin(dir, m[1]+ext)); err == nil {
			return m[1] + ext
		}
	}
	return ""
}

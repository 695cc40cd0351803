package member

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// BackupTable answers a backup request (OpBackup): the applied index, its
// term and a frozen copy of the lock table at that index, read together
// (encode it off the member's goroutine: Frozen.Snapshot).
type BackupTable struct {
	Index, Term uint64
	Table       *fsm.Frozen
}

// backup answers a backup request. Only a leader whose term barrier passed
// answers, and only once a quorum confirmed it still leads and it applied
// up to the read index (the ReadIndex a linearizable get waits for): the
// table then holds every command committed before the request arrived, so
// the backup is never older than an answer the cluster already gave. The
// barrier alone is not enough: a leader cut off from its followers goes on
// believing it leads for up to two election timeouts, while the others
// elect a successor that grants and acknowledges locks this table lacks.
// Anything else answers as a lock call would (NotLeaderError,
// ErrUnavailable, ErrStopped).
func (lm *LockManager) backup(req *request) {
	if err := lm.ready(); err != nil {
		lm.deliver(req, fsm.Result{}, err)
		return
	}
	if !req.confirmed && lm.hooks.backupReadIndex {
		lm.fx.Reads = append(lm.fx.Reads, req.Handle)
		return
	}
	req.delivered = true
	delete(lm.requests, req.Handle)
	lm.fx.Answers = append(lm.fx.Answers, Answer{Handle: req.Handle,
		Backup: &BackupTable{Index: lm.applied, Term: lm.appliedTerm, Table: lm.machine.Freeze()}})
}

// A backup file (raftlock snapshot save, read by raftlock snapshot
// restore) is three parts:
//
//	RAFTLOCK-BACKUP 1\n
//	{"index":I,"term":T,"locks":N,"last_token":L,"size":S,"sha256":"HEX","created":"RFC 3339"}\n
//	the lock table: S bytes
//
// The first line is the magic and the format version. The second is the
// metadata as one line of JSON (at most 4 KiB; unknown fields are refused,
// a new field is a new version): the applied index I and its term T the
// table was read at, the number of locks held and the last fencing token
// issued, the table's size in bytes and the hex SHA-256 of those bytes, and
// when the backup was taken. The rest of the file is the table exactly as
// fsm.Machine.Snapshot encodes it (with its own CRC-32), S bytes and
// nothing after them. A decoder checks the size, the SHA-256, that the
// table decodes, and that its lock count and last token are the
// metadata's. The SHA-256 is of the table alone, so `tail -c S FILE |
// sha256sum` shows it; what it leaves out (index, term, created) decides
// no lock or token: any index and term start a new cluster, as long as
// every member is restored from the same file.
const (
	BackupMagic   = "RAFTLOCK-BACKUP"
	BackupVersion = 1
	maxBackupMeta = 4 << 10
)

// BackupMeta is a backup file's metadata line.
type BackupMeta struct {
	Index     uint64    `json:"index"`
	Term      uint64    `json:"term"`
	Locks     int       `json:"locks"`
	LastToken uint64    `json:"last_token"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	Created   time.Time `json:"created"`
}

// ErrBadBackup is wrapped by every error decoding a backup file.
var ErrBadBackup = errors.New("not a valid raftlock backup")

// NewBackupMeta describes table, read at index and term, as a backup's
// metadata; the table must decode.
func NewBackupMeta(index, term uint64, table []byte, created time.Time) (BackupMeta, error) {
	m, err := fsm.Restore(table)
	if err != nil {
		return BackupMeta{}, fmt.Errorf("lock table at %d: %w", index, err)
	}
	sum := sha256.Sum256(table)
	return BackupMeta{
		Index: index, Term: term, Locks: m.Len(), LastToken: m.LastToken(),
		Size: int64(len(table)), SHA256: hex.EncodeToString(sum[:]), Created: created.UTC(),
	}, nil
}

// EncodeBackup returns the backup file of table described by meta
// (NewBackupMeta).
func EncodeBackup(meta BackupMeta, table []byte) []byte {
	js, err := json.Marshal(meta)
	if err != nil {
		panic(fmt.Sprintf("member: encode backup metadata: %v", err)) // plain fields: cannot fail
	}
	header := BackupMagic + " " + strconv.Itoa(BackupVersion) + "\n"
	out := make([]byte, 0, len(header)+len(js)+1+len(table))
	out = append(out, header...)
	out = append(out, js...)
	out = append(out, '\n')
	return append(out, table...)
}

// DecodeBackup decodes and checks a backup file: its metadata, the lock
// table's bytes and the table itself. Every error wraps ErrBadBackup.
func DecodeBackup(data []byte) (BackupMeta, []byte, *fsm.Machine, error) {
	bad := func(format string, args ...any) (BackupMeta, []byte, *fsm.Machine, error) {
		return BackupMeta{}, nil, nil, fmt.Errorf("%w: "+format, append([]any{ErrBadBackup}, args...)...)
	}
	header, rest, ok := bytes.Cut(data[:min(len(data), 64)], []byte("\n"))
	if !ok {
		return bad("no header line")
	}
	magic, version, _ := bytes.Cut(header, []byte(" "))
	if string(magic) != BackupMagic {
		return bad("no %s header", BackupMagic)
	}
	if string(version) != strconv.Itoa(BackupVersion) {
		return bad("format version %q, want %d", version, BackupVersion)
	}
	rest = data[len(header)+1:]
	line, table, ok := bytes.Cut(rest[:min(len(rest), maxBackupMeta+1)], []byte("\n"))
	if !ok {
		return bad("no metadata line")
	}
	table = rest[len(line)+1:]
	var meta BackupMeta
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&meta); err != nil {
		return bad("metadata: %v", err)
	}
	if d.More() {
		return bad("metadata: trailing data")
	}
	switch {
	case meta.Index == 0 || meta.Term == 0:
		return bad("index %d term %d: both must be > 0", meta.Index, meta.Term)
	case meta.Size != int64(len(table)):
		return bad("table is %d bytes, metadata says %d (truncated?)", len(table), meta.Size)
	}
	sum := sha256.Sum256(table)
	if hex.EncodeToString(sum[:]) != meta.SHA256 {
		return bad("sha256 of the table is %x, metadata says %s", sum, meta.SHA256)
	}
	m, err := fsm.Restore(table)
	if err != nil {
		return bad("lock table: %v", err)
	}
	if m.Len() != meta.Locks || m.LastToken() != meta.LastToken {
		return bad("table holds %d locks, last token %d; metadata says %d, %d", m.Len(), m.LastToken(), meta.Locks, meta.LastToken)
	}
	return meta, table, m, nil
}

package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/raftlock/raftlock/member"
)

// journal records every applied entry with the results of its commands, for
// the chaos harness's post-run audit. Unlike the raft log it is never
// compacted, so the audit sees the whole history of a member that took
// snapshots. It is written only with fault injection enabled.
//
// Each applied batch is one write(2) on an O_APPEND file: a SIGKILL loses
// no line the kernel accepted, and after a restart the entries replayed
// since the last snapshot are written again (readers keep the first copy
// of an index: applying is deterministic, so both copies are equal).
type journal struct {
	path string
	f    *os.File
	size int64 // of the file, as far as writes succeeded
	buf  []byte
}

type journalEntry = member.AppliedEntry

func openJournal(path string) (*journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open audit journal: %w", err)
	}
	if err := dropTornTail(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("open audit journal: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open audit journal: %w", err)
	}
	return &journal{path: path, f: f, size: st.Size()}, nil
}

// dropTornTail cuts a line a kill left half-written, which would otherwise
// swallow the first line this incarnation appends.
func dropTornTail(f *os.File) error {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	size := st.Size()
	buf := make([]byte, min(size, 1<<20))
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil {
			return err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			if cut := start + int64(i) + 1; cut != size {
				return f.Truncate(cut)
			}
			return nil
		}
		end = start
	}
	return f.Truncate(0)
}

// add buffers one applied entry.
func (j *journal) add(e journalEntry) {
	b, err := json.Marshal(e)
	if err != nil {
		return // LoggedCommand always encodes
	}
	j.buf = append(append(j.buf, b...), '\n')
}

// flush writes what add buffered in one write. A failed write keeps the
// buffer for the next flush, and what it wrote in part is cut off: the
// entries are then journalled late but never lost, and no torn line hides
// the one after it. (The caller postpones the snapshot meanwhile: a
// snapshot covering entries the journal lacks would keep a restart from
// ever replaying them into it.)
func (j *journal) flush() error {
	if len(j.buf) == 0 {
		return nil
	}
	n, err := j.f.Write(j.buf)
	if err != nil {
		if n > 0 {
			j.f.Truncate(j.size)
		}
		return fmt.Errorf("write audit journal: %w", err)
	}
	j.size += int64(n)
	j.buf = j.buf[:0]
	return nil
}

// sync makes what was journalled durable: before a snapshot is stored,
// whose synced record would otherwise outlive, across a power loss, the
// journal lines of the entries it covers.
func (j *journal) sync() error {
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("sync audit journal: %w", err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }

// readJournal returns the commands of every journalled entry in log order.
// complete is true when the journal holds every index from 1 to its last
// one and reaches applied: a member that installed a snapshot from the
// leader never applied the entries it replaced, and says false.
func readJournal(path string, applied uint64) (cmds []LoggedCommand, complete bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("open audit journal: %w", err)
	}
	defer f.Close()
	entries := map[uint64]journalEntry{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var e journalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Index == 0 {
			continue // a torn last line
		}
		if _, dup := entries[e.Index]; !dup {
			entries[e.Index] = e
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return nil, false, fmt.Errorf("read audit journal: %w", err)
	}
	indexes := make([]uint64, 0, len(entries))
	for i := range entries {
		indexes = append(indexes, i)
	}
	sort.Slice(indexes, func(a, b int) bool { return indexes[a] < indexes[b] })
	complete = len(indexes) > 0 && indexes[0] == 1 && indexes[len(indexes)-1] == uint64(len(indexes)) &&
		uint64(len(indexes)) >= applied
	if len(indexes) == 0 && applied == 0 {
		complete = true
	}
	for _, i := range indexes {
		cmds = append(cmds, entries[i].Commands...)
	}
	return cmds, complete, nil
}

// Package history is raftlock's history format (ARCHITECTURE.md, Formats): JSON
// Lines, one event per line, optionally after one {"header":{...}} line.
// The chaos harness writes it and the checker reads it; it has no
// dependencies so both can share it.
package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Event types.
const (
	Invoke = "invoke"
	OK     = "ok"
	Fail   = "fail"
	Info   = "info"
)

// Operation names: an event's f. The lock calls are recorded as the
// client makes them; read and write are the fenced resource's.
const (
	OpAcquire = "acquire"
	OpRelease = "release"
	OpRenew   = "renew"
	OpGet     = "get"
	OpList    = "list"
	OpRead    = "read"
	OpWrite   = "write"
)

// Fault events: a nemesis event's f. A fault is recorded when it takes
// effect and again when it is undone: kill and start, pause and resume,
// partition (groups, or cut links) and heal, delay, loss and duplicate
// (on links) and heal, clock (a rate and offset; rate 1 and offset 0 undo
// it), disk and heal, a garbage family and its end, a membership
// change's steps, a workload client process paused and resumed
// (client-pause and client-resume, naming its history processes), and a
// killed member's disk losing what it had not synced (power-cut, naming
// the member and what the cut dropped: a kill and a start frame it), and
// a stopped member's data file damaged (corrupt, naming the member and
// the damage; a kill and a start frame it, and corrupt-end says how the
// member came back: it refused its data, recovered, or started).
const (
	FaultKill                = "kill"
	FaultStart               = "start"
	FaultPause               = "pause"
	FaultResume              = "resume"
	FaultPartition           = "partition"
	FaultHeal                = "heal"
	FaultClock               = "clock"
	FaultDelay               = "delay"
	FaultLoss                = "loss"
	FaultDuplicate           = "duplicate"
	FaultDisk                = "disk"
	FaultSnapshotCut         = "snapshot-cut"
	FaultGarbage             = "garbage"
	FaultGarbageEnd          = "garbage-end"
	FaultGarbageHeartbeat    = "garbage-heartbeat"
	FaultGarbageHeartbeatEnd = "garbage-heartbeat-end"
	FaultMemberRemove        = "member-remove"
	FaultMemberRemoved       = "member-removed"
	FaultMemberAdd           = "member-add"
	FaultMemberPromote       = "member-promote"
	FaultClientPause         = "client-pause"
	FaultClientResume        = "client-resume"
	FaultPowerCut            = "power-cut"
	FaultCorrupt             = "corrupt"
	FaultCorruptEnd          = "corrupt-end"
)

// Nemesis is the process id of fault events; it is written as "nemesis".
const Nemesis Process = -1

// Process is a client id, or Nemesis.
type Process int

// MarshalJSON writes a client id as a number and Nemesis as "nemesis".
func (p Process) MarshalJSON() ([]byte, error) {
	if p == Nemesis {
		return []byte(`"nemesis"`), nil
	}
	return strconv.AppendInt(nil, int64(p), 10), nil
}

// UnmarshalJSON reads a number or "nemesis".
func (p *Process) UnmarshalJSON(b []byte) error {
	if string(b) == `"nemesis"` {
		*p = Nemesis
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 32)
	if err != nil || n < 0 {
		return fmt.Errorf("process must be a non-negative integer or \"nemesis\", got %s", b)
	}
	*p = Process(n)
	return nil
}

// Value holds every field an event's value may carry; absent fields stay
// nil and are not written.
type Value struct {
	LeaseMS *int64  `json:"lease_ms,omitempty"`
	WaitMS  *int64  `json:"wait_ms,omitempty"`
	Held    *bool   `json:"held,omitempty"`
	Token   *uint64 `json:"token,omitempty"`
	Value   *int64  `json:"value,omitempty"`
	Error   string  `json:"error,omitempty"`
	// Owner is who an acquire said it was (invoke), or who a get found
	// holding the key (ok).
	Owner string `json:"owner,omitempty"`
	// Force marks a forced release (invoke, without a token): an
	// operator's, which frees the key whatever its token; its ok names the
	// token it released.
	Force bool `json:"force,omitempty"`
	// A list's page: invoke {after, limit} (its key is the prefix, "" for
	// every key); ok {locks, more}.
	After    string       `json:"after,omitempty"`
	Limit    *int64       `json:"limit,omitempty"`
	Locks    []ListedLock `json:"locks,omitempty"`
	More     *bool        `json:"more,omitempty"`
	Nodes    []int        `json:"nodes,omitempty"`
	Groups   [][]int      `json:"groups,omitempty"`
	Node     *int         `json:"node,omitempty"`
	Rate     *float64     `json:"rate,omitempty"`
	OffsetMS *int64       `json:"offset_ms,omitempty"`
	// Network faults on directed peer links: Links lists [from, to] pairs
	// (a one-way partition cuts only those directions); DelayMS and JitterMS
	// slow them, Loss drops that fraction of their messages.
	Links    [][]int  `json:"links,omitempty"`
	DelayMS  *int64   `json:"delay_ms,omitempty"`
	JitterMS *int64   `json:"jitter_ms,omitempty"`
	Loss     *float64 `json:"loss,omitempty"`
	// Processes are the client processes a client-pause stopped (or its
	// resume restarted): the history process each was running.
	Processes []Process `json:"processes,omitempty"`
	// Cut is what a power cut dropped of a member's (Node's) disk.
	Cut *PowerCut `json:"cut,omitempty"`
	// Damage is what the corrupt family did to a member's (Node's) data
	// file, and at its end how the member came back.
	Damage *Damage `json:"damage,omitempty"`
}

// Damage is one data file of a stopped member damaged: its path in the
// member's data directory, its kind ("log": a write-ahead log or an
// sstable; "snapshot": a snapshot file; "metadata": pebble's MANIFEST or
// OPTIONS), how ("bitflip" of Bit at Offset, or "truncate" to
// TruncatedTo bytes) and its size before. At the fault's end (corrupt-end)
// Outcome says how the member came back ("refused": it would not start,
// Message being its one line; "recovered": it started, having dropped a
// torn log tail; "started": it started and noticed nothing; "crashed").
type Damage struct {
	File        string `json:"file"`
	Kind        string `json:"kind"`
	How         string `json:"how"`
	Offset      *int64 `json:"offset,omitempty"`
	Bit         *int   `json:"bit,omitempty"`
	TruncatedTo *int64 `json:"truncated_to,omitempty"`
	Size        int64  `json:"size"`
	Outcome     string `json:"outcome,omitempty"`
	Message     string `json:"message,omitempty"`
}

// PowerCut is what a power cut dropped of a member's disk: its mode
// ("drop-all": every unsynced write; "torn": a page-aligned prefix of
// each file's unsynced writes kept), the files whose content or size it
// changed, the unsynced bytes it removed and kept, and the unsynced
// directory changes (creates, renames, unlinks) it undid.
type PowerCut struct {
	Mode          string `json:"mode"`
	Files         int    `json:"files"`
	BytesDropped  int64  `json:"bytes_dropped"`
	BytesKept     int64  `json:"bytes_kept,omitempty"`
	EntriesUndone int    `json:"entries_undone"`
}

// ListedLock is one lock of a list's page.
type ListedLock struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
	Owner string `json:"owner,omitempty"`
}

// Event is one line of a history.
type Event struct {
	Index   int64   `json:"index"`
	Time    int64   `json:"time"` // ns since the run began, on the harness's monotonic clock
	Process Process `json:"process"`
	Type    string  `json:"type"`
	F       string  `json:"f"`
	Key     string  `json:"key,omitempty"`
	Value   Value   `json:"value"`
}

// Ptr returns a pointer to v, for Value's optional fields.
func Ptr[T any](v T) *T { return &v }

// File is a history as Parse reads it.
type File struct {
	Header map[string]any // nil when the history has none
	Events []Event        // in file order
	// Cut is the number of the last line when Parse dropped it as cut
	// short, 0 when it dropped none: a last line that ends without a
	// newline and stops in the middle of its JSON is what a writer
	// stopped in the middle of a line leaves (the harness killed, a full
	// disk), and the lines before it are whole.
	Cut int
}

// Read parses a history as Parse does, returning its header and events,
// but refuses a last line cut short: a reader that wants the whole lines
// before one uses Parse, which says it dropped it.
func Read(r io.Reader) (map[string]any, []Event, error) {
	f, err := Parse(r)
	if err == nil && f.Cut > 0 {
		err = fmt.Errorf("line %d: %w (the line is cut short)", f.Cut, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return nil, nil, err
	}
	return f.Header, f.Events, nil
}

// Parse reads a history. It checks the format (one JSON object per line,
// times that never go backwards, each type's required fields, a process
// with at most one open operation, completions matching their invocations
// and not stamped before them) and returns the header, if any, and the
// events in file order. Errors name the line. A last line cut short is
// dropped and named in Cut, never read as an error: every line before it
// is whole, and the operation it would have completed stays open, which
// the checker takes as info (outcome unknown). A line cut short anywhere
// else, or a last line that is whole and wrong, is an error.
func Parse(r io.Reader) (File, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	unterminated := false // the line just scanned is the last and has no newline
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		unterminated = atEOF && tok != nil && bytes.IndexByte(data[:adv], '\n') < 0
		return adv, tok, err
	})
	var f File
	v := validator{open: map[Process]Event{}, retired: map[Process]bool{}}
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if bytes.HasPrefix(b, []byte(`{"header"`)) {
			if len(f.Events) > 0 || f.Header != nil {
				return File{}, fmt.Errorf("line %d: a header may only be the first line", line)
			}
			var h struct {
				Header map[string]any `json:"header"`
			}
			if err := decodeOne(b, &h); err != nil {
				if cutShort(err, unterminated) {
					f.Cut = line
					break
				}
				return File{}, fmt.Errorf("line %d: header: %w", line, err)
			}
			f.Header = h.Header
			continue
		}
		var e Event
		if err := decodeOne(b, &e); err != nil {
			if cutShort(err, unterminated) {
				f.Cut = line
				break
			}
			return File{}, fmt.Errorf("line %d: %w", line, err)
		}
		if err := v.check(e); err != nil {
			return File{}, fmt.Errorf("line %d: %w", line, err)
		}
		f.Events = append(f.Events, e)
	}
	if err := sc.Err(); err != nil {
		return File{}, fmt.Errorf("line %d: %w", line+1, err)
	}
	return f, nil
}

// cutShort says whether a line that did not decode was cut short: it is
// the last, has no newline, and its JSON ends before it closes. Text after
// a whole object, or a wrong field, is not what a cut leaves.
func cutShort(err error, unterminated bool) bool {
	return unterminated && errors.Is(err, io.ErrUnexpectedEOF)
}

// decodeOne decodes exactly one JSON object from b: a second object or any
// trailing text on the line is an error, not silently dropped.
func decodeOne(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if off := dec.InputOffset(); int(off) < len(b) {
		if _, err := dec.Token(); err == io.EOF {
			return nil
		}
		return fmt.Errorf("unexpected text after the event at column %d: %.20q", off+1, b[off:])
	}
	return nil
}

// validator carries what checking one event needs from the events before it.
type validator struct {
	open     map[Process]Event
	retired  map[Process]bool
	seen     bool
	lastTime int64
	lastIdx  int64
}

func (v *validator) check(e Event) error {
	if e.Time < 0 {
		return fmt.Errorf("negative time %d", e.Time)
	}
	if err := v.checkOp(e); err != nil {
		return err
	}
	if v.seen {
		// The harness stamps and writes events under one lock, so file
		// order is time order and index order.
		if e.Time < v.lastTime {
			return fmt.Errorf("time %d goes backwards (the event before has %d)", e.Time, v.lastTime)
		}
		if e.Index <= v.lastIdx {
			return fmt.Errorf("index %d does not follow index %d", e.Index, v.lastIdx)
		}
	}
	v.seen, v.lastTime, v.lastIdx = true, e.Time, e.Index
	return nil
}

// checkOp checks e on its own and against the operation it completes.
func (v *validator) checkOp(e Event) error {
	if e.Process == Nemesis {
		return checkNemesis(e)
	}
	switch e.F {
	case OpAcquire, OpRelease, OpRenew, OpGet, OpList, OpWrite, OpRead:
	default:
		return fmt.Errorf("unknown f %q", e.F)
	}
	switch e.Type {
	case Invoke:
		if e.Key == "" && e.F != OpList { // a list's key is its prefix, "" for all
			return errors.New("invocation without a key")
		}
		if err := checkInvokeValue(e); err != nil {
			return err
		}
		if v.retired[e.Process] {
			return fmt.Errorf("process %d invoked again after an info", e.Process)
		}
		if prev, ok := v.open[e.Process]; ok {
			return fmt.Errorf("process %d invoked %s while %s (index %d) is open", e.Process, e.F, prev.F, prev.Index)
		}
		v.open[e.Process] = e
	case OK, Fail, Info:
		inv, ok := v.open[e.Process]
		if !ok {
			return fmt.Errorf("process %d completes %s with nothing open", e.Process, e.F)
		}
		if inv.F != e.F || (e.Key != "" && inv.Key != e.Key) {
			return fmt.Errorf("process %d completes %s %q but invoked %s %q", e.Process, e.F, e.Key, inv.F, inv.Key)
		}
		if e.Time < inv.Time {
			return fmt.Errorf("completion at time %d stamped before its invocation (index %d, time %d)", e.Time, inv.Index, inv.Time)
		}
		if e.Type == OK {
			if err := checkOKValue(e); err != nil {
				return err
			}
			if inv.Value.Force && e.Value.Token == nil {
				return errors.New("ok forced release without the token it released")
			}
		}
		delete(v.open, e.Process)
		if e.Type == Info {
			v.retired[e.Process] = true
		}
	default:
		return fmt.Errorf("unknown type %q", e.Type)
	}
	return nil
}

// checkInvokeValue: the fields an invocation must carry (the history
// format); a missing lease or token would otherwise read as 0 and change what
// the checks decide.
func checkInvokeValue(e Event) error {
	v := e.Value
	if (e.F == OpAcquire || e.F == OpRenew) && (v.LeaseMS == nil || *v.LeaseMS <= 0) {
		return fmt.Errorf("%s invocation without a positive lease_ms", e.F)
	}
	switch e.F {
	case OpRenew:
		if v.Token == nil {
			return errors.New("renew invocation without a token")
		}
	case OpRelease:
		if v.Token == nil && !v.Force {
			return errors.New("release invocation without a token (or force)")
		}
		if v.Token != nil && v.Force {
			return errors.New("forced release invocation with a token")
		}
	case OpRead, OpWrite:
		if v.Token == nil {
			return fmt.Errorf("%s invocation without a token", e.F)
		}
	}
	if v.Force && e.F != OpRelease {
		return fmt.Errorf("%s invocation with force", e.F)
	}
	return nil
}

// checkOKValue: the fields a successful completion must carry.
func checkOKValue(e Event) error {
	v := e.Value
	switch e.F {
	case OpAcquire:
		if v.Token == nil {
			return errors.New("ok acquire without a token")
		}
	case OpList:
		if v.More == nil {
			return errors.New("ok list without more")
		}
		for i, l := range v.Locks {
			if l.Key == "" || l.Token == 0 || !strings.HasPrefix(l.Key, e.Key) || (i > 0 && l.Key <= v.Locks[i-1].Key) {
				return fmt.Errorf("ok list: lock %d (%q, token %d) is not a held key under the prefix in key order", i, l.Key, l.Token)
			}
		}
	case OpGet:
		if v.Held == nil {
			return errors.New("ok get without held")
		}
		if *v.Held && v.Token == nil {
			return errors.New("ok get held without a token")
		}
	}
	return nil
}

// checkNemesis: a fault event is an info of the nemesis process. The
// families the checker reasons about must name their targets; any other f
// is accepted (a newer harness may inject faults this checker only shows).
func checkNemesis(e Event) error {
	if e.Type != Info {
		return fmt.Errorf("nemesis event of type %q, want info", e.Type)
	}
	v := e.Value
	switch e.F {
	case FaultKill, FaultStart, FaultPause, FaultResume, FaultGarbage, FaultGarbageEnd, FaultGarbageHeartbeat, FaultGarbageHeartbeatEnd:
		if len(v.Nodes) == 0 {
			return fmt.Errorf("nemesis %s without nodes", e.F)
		}
	case FaultPowerCut:
		if v.Node == nil || v.Cut == nil {
			return errors.New("nemesis power-cut without node and cut")
		}
	case FaultCorrupt, FaultCorruptEnd:
		if v.Node == nil || v.Damage == nil {
			return fmt.Errorf("nemesis %s without node and damage", e.F)
		}
	case FaultClientPause, FaultClientResume:
		if len(v.Processes) == 0 {
			return fmt.Errorf("nemesis %s without processes", e.F)
		}
	case FaultPartition:
		if len(v.Groups) == 0 && len(v.Links) == 0 {
			return errors.New("nemesis partition without groups or links")
		}
	case FaultDelay, FaultLoss:
		if len(v.Links) == 0 {
			return fmt.Errorf("nemesis %s without links", e.F)
		}
	case FaultClock:
		if v.Node == nil || v.Rate == nil {
			return errors.New("nemesis clock without node and rate")
		}
		if *v.Rate <= 0 {
			return fmt.Errorf("nemesis clock with rate %g, want > 0", *v.Rate)
		}
	}
	return nil
}

// Recorder appends events to a writer as they happen, from many
// goroutines, and keeps them in memory. Each line, the header's and each
// event's, goes to the writer whole in one Write, under the recorder's
// lock, as it is recorded: the history holds only whole lines whenever
// the harness stops, interrupted or killed (a buffer written out when
// full would cut a line at its boundary), and a kill loses nothing that
// was recorded.
type Recorder struct {
	mu     sync.Mutex
	start  time.Time
	w      io.Writer
	events []Event
	err    error
}

// NewRecorder starts a history at now; header may be nil.
func NewRecorder(w io.Writer, header map[string]any) (*Recorder, error) {
	r := &Recorder{start: time.Now(), w: w}
	if header != nil {
		b, err := json.Marshal(map[string]any{"header": header})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return nil, fmt.Errorf("write the history's header: %w", err)
		}
	}
	return r, nil
}

// Now is the recorder's clock: ns since the run began.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Record appends one event, stamping its index and time.
func (r *Recorder) Record(p Process, typ, f, key string, v Value) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := Event{Index: int64(len(r.events)), Time: r.Now(), Process: p, Type: typ, F: f, Key: key, Value: v}
	r.events = append(r.events, e)
	b, err := json.Marshal(e)
	if err == nil {
		_, err = r.w.Write(append(b, '\n'))
	}
	if err != nil && r.err == nil {
		r.err = err
	}
	return e
}

// Events returns a copy of what was recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Err is the first error writing an event met, nil if none did: the
// history then lacks what Events has from there on.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

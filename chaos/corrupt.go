package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/chaos/fault"
	"github.com/raftlock/raftlock/checker"
	"github.com/raftlock/raftlock/checker/history"
)

// The corrupt family: a disk damaged while its member was powered off.
// One member is stopped, one of its data files gets a bit flipped or is
// truncated, and the member is started again. It must come back with
// everything it had (its own checksums and the clean-stop seal tell it
// what is whole: node/logstore/damage.go), or refuse to start with one
// line naming the file; it never serves, votes or answers over data it
// lost. A member that refuses is replaced as an operator would: removed
// from the configuration, and a new member added that catches up by
// snapshot (membership.go's replace), so the cluster is whole again for
// the next faults and the final checks.
//
// The member is stopped with SIGTERM, as a graceful shutdown: a disk
// damaged while its machine was off was last written by a member that
// stopped (a crash stop is the power families' and the kill family's
// subject). The member's clean stop writes its seal, and the seal is
// what lets it tell a log truncated or torn at its end afterwards from
// one that was always that short. A member that does not stop within
// corruptStopWait is killed, and is then judged as after a crash.
//
// corrupt does not need FUSE: the files are damaged on the plain disk.
// It runs alone (it is not combinable): with a member down, a second
// fault on another could leave no majority.

// corruptStopWait bounds a graceful stop (a leader hands over first).
const corruptStopWait = 10 * time.Second

// corruptStartWait bounds how long a restarted member takes to serve its
// metrics or exit: opening pebble and scanning its log take well under a
// second on the runs' stores.
const corruptStartWait = 20 * time.Second

// refusalPrefix begins the one line a member that refuses its damaged
// data exits with (logstore.DamagedError).
const refusalPrefix = "refusing to start: "

// The outcomes of a member started again over damaged data.
const (
	outcomeRefused   = "refused"
	outcomeRecovered = "recovered"
	outcomeStarted   = "started"
	outcomeCrashed   = "crashed"
)

// CorruptReport is the corrupt family's account, written to corrupt.json
// when it ran: each fault, with what it damaged and how the member came
// back, and the storage losses the storage-loss check reports.
type CorruptReport struct {
	Faults    []CorruptFault `json:"faults"`
	Refused   int            `json:"refused"`
	Recovered int            `json:"recovered"`
	Started   int            `json:"started"`
	Crashed   int            `json:"crashed"`
	// Replaced counts the members that refused and were replaced;
	// ReplaceFailed those the cluster could not replace (left down).
	Replaced      int      `json:"replaced"`
	ReplaceFailed int      `json:"replace_failed"`
	Losses        []string `json:"storage_losses"`
}

// CorruptFault is one corrupt fault.
type CorruptFault struct {
	Node   int            `json:"node"`
	Damage history.Damage `json:"damage"`
	// AppliedBefore is the member's applied index read before its stop
	// (0: not read); OpenedLast the last index its store loaded when it
	// started again.
	AppliedBefore uint64 `json:"applied_before"`
	OpenedLast    uint64 `json:"opened_last,omitempty"`
	CleanStop     bool   `json:"clean_stop"`
	Replacement   string `json:"replacement,omitempty"`
}

// corruptLog is the family's faults so far (the nemesis's goroutine
// writes, collect reads at the end).
type corruptLog struct {
	mu     sync.Mutex
	report CorruptReport
}

func (l *corruptLog) add(f CorruptFault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &l.report
	r.Faults = append(r.Faults, f)
	switch f.Damage.Outcome {
	case outcomeRefused:
		r.Refused++
		switch {
		case strings.HasPrefix(f.Replacement, "replace "):
			r.Replaced++
		default:
			r.ReplaceFailed++
		}
	case outcomeRecovered:
		r.Recovered++
	case outcomeStarted:
		r.Started++
	default:
		r.Crashed++
	}
	if f.Damage.Outcome == outcomeRecovered || f.Damage.Outcome == outcomeStarted {
		if f.AppliedBefore > 0 && f.OpenedLast < f.AppliedBefore {
			r.Losses = append(r.Losses, fmt.Sprintf(
				"member %d had applied index %d before it stopped; after %s of %s it started over a log ending at %d, instead of refusing its data",
				f.Node, f.AppliedBefore, f.Damage.How, f.Damage.File, f.OpenedLast))
		}
	}
}

// Report is a copy of the report so far.
func (l *corruptLog) Report() CorruptReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.report
	r.Faults = slices.Clone(r.Faults)
	r.Losses = slices.Clone(r.Losses)
	if r.Faults == nil {
		r.Faults = []CorruptFault{}
	}
	if r.Losses == nil {
		r.Losses = []string{}
	}
	return r
}

// storageLoss is the storage-loss check's evidence: nil when no corrupt
// fault ran.
func (r CorruptReport) storageLoss() *checker.StorageLoss {
	if len(r.Faults) == 0 {
		return nil
	}
	return &checker.StorageLoss{Started: r.Recovered + r.Started, Losses: r.Losses}
}

// corrupt carries a corrupt fault out: read the member's applied index,
// stop it gracefully, damage one of its files, start it again and see
// how it comes back; replace it if it refused. The whole fault runs to
// its end even when the run's time is up, as membership's does: the
// final checks need a whole cluster.
func (n *Nemesis) corrupt(ctx context.Context, rng *rand.Rand) (func(context.Context), string) {
	ctx = context.WithoutCancel(ctx)
	noop := func(context.Context) {}
	cv := corruptView{view{ctx, n.Sup}}
	c := fault.DrawCorrupt(rng, cv)
	if up := len(cv.Up()); up-1 < len(cv.Members())/2+1 {
		// A member is down already (one a failed replacement left, or
		// one that crashed): stopping another would leave no majority.
		return noop, fmt.Sprintf("corrupt: not run, only %d of %d members up", up, len(cv.Members()))
	}
	id := c.Node
	f := CorruptFault{Node: id}
	mctx, cancel := context.WithTimeout(ctx, time.Second)
	if m, err := n.Sup.Metrics(mctx, id); err == nil {
		f.AppliedBefore = m.Applied
	}
	cancel()
	c.Record(n.Rec)
	n.setCurrent("stop %d gracefully", id)
	f.CleanStop = n.Sup.stopGracefully(id, corruptStopWait)
	dmg, err := damageFile(n.Sup.DataDir(id), c)
	if err != nil {
		// Nothing was damaged: start it again, and count nothing.
		n.Log.Error("corrupt: no file damaged", "node", id, "err", err)
		n.restart([]int{id})(ctx)
		return noop, fmt.Sprintf("corrupt %d: nothing damaged (%v)", id, err)
	}
	f.Damage = dmg
	fault.Damaged{Node: id, Damage: dmg}.Record(n.Rec)
	n.setCurrent("start %d over its damaged %s", id, dmg.File)
	crashesBefore := len(n.Sup.Crashes())
	if err := n.Sup.StartNode(id); err != nil {
		n.Log.Error("corrupt: restart failed", "node", id, "err", err)
	}
	fault.Start{Nodes: []int{id}}.Record(n.Rec)
	f.Damage.Outcome, f.Damage.Message, f.OpenedLast = n.comeBack(ctx, id, crashesBefore)
	fault.Damaged{Node: id, Damage: f.Damage, End: true}.Record(n.Rec)
	desc := fmt.Sprintf("corrupt %d: %s %s, %s", id, dmg.How, dmg.File, f.Damage.Outcome)
	if f.Damage.Outcome == outcomeRefused {
		n.setCurrent("replace %d, which refused its damaged data", id)
		f.Replacement, _ = n.replace(ctx, id)
		desc += ", " + f.Replacement
	}
	n.Corrupt.add(f)
	return noop, desc
}

// corruptView offers only running members as targets: one that a
// failed replacement left down is not damaged again.
type corruptView struct{ view }

func (v corruptView) Up() []int {
	var up []int
	for _, id := range v.sup.IDs() {
		if v.sup.Running(id) && !v.sup.Paused(id) {
			up = append(up, id)
		}
	}
	return up
}

// comeBack waits until member id, just started over damaged data, serves
// its metrics (it started: recovered if its store dropped a torn log
// tail, else started) or exits (refused, when its last line is the
// refusal, which is then no crash; else crashed), within
// corruptStartWait. It returns the outcome, the refusal's line, and the
// last index the store loaded.
func (n *Nemesis) comeBack(ctx context.Context, id, crashesBefore int) (outcome, message string, openedLast uint64) {
	deadline := time.Now().Add(corruptStartWait)
	for time.Now().Before(deadline) {
		if !n.Sup.Running(id) {
			if c, ok := n.Sup.excuseRefusal(id, crashesBefore); ok {
				return outcomeRefused, c, 0
			}
			return outcomeCrashed, "", 0
		}
		mctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		m, err := n.Sup.Metrics(mctx, id)
		cancel()
		if err == nil {
			if m.DroppedTails > 0 {
				return outcomeRecovered, "", m.OpenedLast
			}
			return outcomeStarted, "", m.OpenedLast
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.Log.Error("corrupt: the member neither served nor exited", "node", id, "bound", corruptStartWait)
	return outcomeCrashed, "neither served nor exited within " + corruptStartWait.String(), 0
}

// stopGracefully stops member id with SIGTERM, as a graceful shutdown
// (a leader hands over first), and waits up to wait for it to exit;
// past it, it is killed. It says whether it stopped by itself with exit
// status 0: its store then wrote its clean-stop seal.
func (s *Supervisor) stopGracefully(id int, wait time.Duration) bool {
	s.mu.Lock()
	m := s.node(id)
	cmd, done := m.cmd, m.exited
	m.stopped() // forgotten first: its exit is no crash
	s.mu.Unlock()
	if cmd == nil {
		return false
	}
	cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return cmd.ProcessState != nil && cmd.ProcessState.Success()
	case <-t.C:
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return false
	}
}

// excuseRefusal looks among the crashes recorded since the first
// crashesBefore for member id's exit with the refusal line: a member
// that refuses its damaged data does what it must, so the exit is taken
// off the crashes and its line returned. ok false: it died some other
// way (a panic), which stays a crash.
func (s *Supervisor) excuseRefusal(id, crashesBefore int) (line string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.crashes) - 1; i >= crashesBefore && i < len(s.crashes); i-- {
		c := s.crashes[i]
		if c.Node != id {
			continue
		}
		if _, after, found := strings.Cut(c.Reason, refusalPrefix); found && !strings.HasPrefix(c.Reason, "panic: ") {
			s.crashes = slices.Delete(s.crashes, i, i+1)
			return refusalPrefix + after, true
		}
		return "", false
	}
	return "", false
}

// damageFiles lists the files of kind in a member's data directory,
// relative to it, sorted, each with its size; empty files (pebble's
// markers, a fresh log) are left out: nothing in them to damage.
func damageFiles(dir, kind string) ([]string, []int64) {
	var names []string
	var sizes []int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		if damageKind(rel) != kind {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Size() > 0 {
			names = append(names, rel)
			sizes = append(sizes, info.Size())
		}
		return nil
	})
	return names, sizes
}

// damageKind is the kind of a data file (its path in the data
// directory), "" for files the family leaves alone: the member's
// identity, its peers' incarnations, the clean-stop seal, spool files.
func damageKind(rel string) string {
	base := filepath.Base(rel)
	switch {
	case filepath.Dir(rel) == "snap" && strings.HasSuffix(base, ".snap"):
		return fault.DamageSnapshot
	case filepath.Dir(rel) != ".":
		return ""
	case strings.HasSuffix(base, ".log"), strings.HasSuffix(base, ".sst"):
		return fault.DamageLog
	case strings.HasPrefix(base, "MANIFEST-"), strings.HasPrefix(base, "OPTIONS-"), base == "CURRENT":
		return fault.DamageMetadata
	}
	return ""
}

// damageFile damages the file c draws in dir: of c's kind, or when the
// member has none of it (no sstable, a snapshot still inline), of the
// next kind that has one. The member must be stopped.
func damageFile(dir string, c fault.Corrupt) (history.Damage, error) {
	start := slices.Index(fault.DamageKinds, c.Kind)
	for i := range fault.DamageKinds {
		kind := fault.DamageKinds[(start+i)%len(fault.DamageKinds)]
		names, sizes := damageFiles(dir, kind)
		if len(names) == 0 {
			continue
		}
		j := int(c.File % uint64(len(names)))
		if kind == fault.DamageLog && c.Newest {
			if w := newestWAL(names); w >= 0 {
				j = w
			}
		}
		d := history.Damage{File: names[j], Kind: kind, Size: sizes[j]}
		path := filepath.Join(dir, names[j])
		off := c.Offset(sizes[j], kind)
		if c.Truncate {
			d.How, d.TruncatedTo = "truncate", history.Ptr(off)
			return d, os.Truncate(path, off)
		}
		d.How, d.Offset, d.Bit = "bitflip", history.Ptr(off), history.Ptr(c.Bit)
		return d, flipBit(path, off, c.Bit)
	}
	return history.Damage{}, errors.New("the member has no data file to damage")
}

// flipBit flips bit of the byte at off in path, synced.
func flipBit(path string, off int64, bit int) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return fmt.Errorf("read %s at %d: %w", path, off, err)
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b[:], off); err != nil {
		return fmt.Errorf("write %s at %d: %w", path, off, err)
	}
	return f.Sync()
}

// writeCorrupt writes the corrupt family's report to corrupt.json and
// says it in a progress line.
func (r *run) writeCorrupt(c CorruptReport) error {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "chaos: corrupt: %d files damaged; the members refused %d (replaced %d, not %d), recovered %d, started %d, crashed %d; storage losses %d\n",
			len(c.Faults), c.Refused, c.Replaced, c.ReplaceFailed, c.Recovered, c.Started, c.Crashed, len(c.Losses))
	}
	return writeJSON(r.cfg.Out, "corrupt.json", c, true)
}

// newestWAL is the index in names of the newest write-ahead log (the
// highest number: pebble's names are zero-padded), -1 if none.
func newestWAL(names []string) int {
	best := -1
	for i, n := range names {
		if strings.HasSuffix(n, ".log") && (best < 0 || n > names[best]) {
			best = i
		}
	}
	return best
}

package checker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/raftlock/raftlock/checker/history"
	"github.com/raftlock/raftlock/internal/reportdir"
)

// Inputs are the files a check of a recorded history reads, as raftlock
// check names them: the history, and optionally the members' digests, a
// chaos run's committed log and settled info operations.
type Inputs struct{ History, Digests, Log, Resolved string }

// Load reads the history, and the other inputs named into opts. A last
// line cut short (history.File's Cut) is left out, and a note in opts
// says so.
func (in Inputs) Load(opts *Options) ([]history.Event, error) {
	f, err := os.Open(in.History)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := history.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: malformed history: %w", in.History, err)
	}
	if h.Cut > 0 {
		// What a writer stopped mid-line leaves: the lines before are
		// whole, and the checks run on them.
		opts.Notes = append(opts.Notes, fmt.Sprintf("%s: its last line (%d) is cut short and was ignored", in.History, h.Cut))
	}
	if in.Log != "" {
		opts.Log = &CommittedLog{}
	}
	for _, j := range []struct {
		file string
		into any
	}{{in.Digests, &opts.Digests}, {in.Log, opts.Log}, {in.Resolved, &opts.Resolutions}} {
		if j.file == "" {
			continue
		}
		b, err := os.ReadFile(j.file)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, j.into); err != nil {
			return nil, fmt.Errorf("%s: %w", j.file, err)
		}
	}
	return h.Events, nil
}

// PrepareOut readies the report directory out: as chaos and sim do, it
// replaces only a previous report, refuses anything else, and never the
// report being checked, whose history and logs would go with it.
func (in Inputs) PrepareOut(out string) error {
	for _, f := range []string{in.History, in.Digests, in.Log, in.Resolved} {
		if f != "" && within(f, out) {
			return fmt.Errorf("--out %s holds %s, an input of this check: choose another --out", out, f)
		}
	}
	return reportdir.Prepare(out)
}

// within says whether file lies in dir or below it.
func within(file, dir string) bool {
	f, err1 := filepath.Abs(file)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, f)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

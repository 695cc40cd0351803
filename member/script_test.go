package member

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// rewrite makes TestScripts write each script's output as its expected
// output: go test ./member -run TestScripts -rewrite.
var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.txt with the output the scripts produce")

// The lock rules as scripts (testdata/*.txt), in the style of etcd-raft's
// datadriven tests. A script is a sequence of commands, each followed by
// "----" and the output it must produce, then a blank line:
//
//	# a comment
//	acquire h=1 key=k lease=1000
//	----
//	propose Grant{"k", 1000ms}@2
//
// The commands drive one LockManager (member 1) through lmHarness, whose
// effect lines are the output; see scriptCommands. A script's first line
// may be "bug NAME" (in a comment: "# bug: NAME"): TestScriptsCatchTheirBug
// runs the script with that bug planted and requires its output to differ,
// so every script can fail when the rule it shows is broken.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			s := readScript(t, file)
			got := s.run(t, "")
			if *rewrite {
				if err := os.WriteFile(file, []byte(s.format(got)), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			for i, c := range s.cmds {
				if got[i] != c.want {
					t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", file, c.line, c.text, got[i], c.want)
				}
			}
		})
	}
}

// Each script names the planted bug that breaks the rule it shows; with
// that bug its output must change, or the script could not fail.
func TestScriptsCatchTheirBug(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			s := readScript(t, file)
			if s.bug == "" {
				t.Fatalf("%s names no bug (# bug: NAME) that breaks its rule", file)
			}
			got := s.run(t, s.bug)
			for i, c := range s.cmds {
				if got[i] != c.want {
					t.Logf("with %s planted, line %d (%s) gives\n%s\nnot\n%s", s.bug, c.line, c.text, got[i], c.want)
					return
				}
			}
			t.Fatalf("with %s planted, %s produces its expected output: it cannot catch the bug", s.bug, file)
		})
	}
}

type scriptCmd struct {
	line int    // where the command is in its file
	text string // the command line
	want string // its expected output
}

type script struct {
	bug    string   // from "# bug: NAME"
	header []string // the comment lines before the first command
	cmds   []scriptCmd
}

// readScript parses file: comments (#) and blank lines between commands,
// each command line followed by "----" and its output up to a blank line.
func readScript(t *testing.T, file string) *script {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	s := &script{}
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case strings.HasPrefix(l, "# bug:"):
			s.bug = strings.TrimSpace(strings.TrimPrefix(l, "# bug:"))
			fallthrough
		case l == "" || strings.HasPrefix(l, "#"):
			if len(s.cmds) == 0 {
				s.header = append(s.header, lines[i])
			}
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: %q is not followed by ----", file, i+1, l)
		}
		c := scriptCmd{line: i + 1, text: l}
		var out []string
		for i += 2; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		c.want = strings.Join(out, "\n")
		s.cmds = append(s.cmds, c)
	}
	return s
}

// format writes s back with outputs got (for -rewrite).
func (s *script) format(got []string) string {
	var b strings.Builder
	for _, h := range s.header {
		b.WriteString(h + "\n")
	}
	for i, c := range s.cmds {
		if i > 0 || (len(s.header) > 0 && s.header[len(s.header)-1] != "") {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s\n----\n%s\n", c.text, got[i])
	}
	return b.String()
}

// run runs every command on a fresh manager with bug planted and returns
// their outputs. With a bug, what the harness would fail the test for
// (an answer given twice, a commit with nothing proposed) is output: the
// script stops there.
func (s *script) run(t *testing.T, bug string) []string {
	tb := testing.TB(t)
	if bug != "" {
		tb = &lenient{TB: t}
	}
	h := newLM(tb, bug)
	out := make([]string, len(s.cmds))
	for i, c := range s.cmds {
		fields := strings.Fields(c.text)
		args := scriptArgs{t: t, where: c.text, kv: map[string]string{}}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			args.kv[k] = v
		}
		cmd, ok := scriptCommands[fields[0]]
		if !ok {
			t.Fatalf("line %d: unknown command %q", c.line, fields[0])
		}
		res, failed := runLenient(h, cmd, args)
		if res == "" {
			res = "(nothing)"
		}
		out[i] = strings.ReplaceAll(res, "; ", "\n")
		if failed {
			break
		}
	}
	return out
}

// lenient is a testing.TB whose failures are output: Errorf records, and
// Fatalf ends the command (runLenient).
type lenient struct {
	testing.TB
	errs []string
}

// errLenientFatal unwinds a command that failed under lenient.
type errLenientFatal struct{}

func (l *lenient) Helper() {}
func (l *lenient) Errorf(format string, args ...any) {
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}
func (l *lenient) Fatalf(format string, args ...any) {
	l.Errorf(format, args...)
	panic(errLenientFatal{})
}
func (l *lenient) Fatal(args ...any) { l.Fatalf("%s", fmt.Sprint(args...)) }

// runLenient runs cmd; under a lenient harness a failure becomes its
// output ("error: ..."), and failed says the script stops.
func runLenient(h *lmHarness, cmd func(*lmHarness, scriptArgs) string, a scriptArgs) (res string, failed bool) {
	l, ok := h.t.(*lenient)
	if !ok {
		return cmd(h, a), false
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(errLenientFatal); !ok {
				panic(r)
			}
			failed = true
		}
		for _, e := range l.errs {
			res += "; error: " + e
		}
		l.errs = nil
	}()
	return cmd(h, a), false
}

// scriptArgs are a command's key=value arguments.
type scriptArgs struct {
	t     *testing.T
	where string
	kv    map[string]string
}

func (a scriptArgs) num(key string, def uint64) uint64 {
	v, ok := a.kv[key]
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		a.t.Fatalf("%s: %s=%q is not a number", a.where, key, v)
	}
	return n
}

func (a scriptArgs) ms(key string, def uint64) time.Duration {
	return time.Duration(a.num(key, def)) * ms
}

func (a scriptArgs) key() string {
	if k, ok := a.kv["key"]; ok {
		return k
	}
	return "k"
}

// request is the call a command describes: h (handle), key (default k),
// token, lease and wait in ms, owner, stale.
func (a scriptArgs) request(op Op) Request {
	_, stale := a.kv["stale"]
	return Request{Handle: a.num("h", 1), Op: op, Key: a.key(), Token: a.num("token", 0),
		Lease: a.ms("lease", 1000), Wait: a.ms("wait", 0), Owner: a.kv["owner"], Stale: stale}
}

// scriptCommands are what a script can do; each returns the effects.
var scriptCommands = map[string]func(h *lmHarness, a scriptArgs) string{
	// lead term=T: member 1 leads term T and applies its first entry.
	"lead": func(h *lmHarness, a scriptArgs) string {
		term := a.num("term", 2)
		return h.do(func() { h.lm.Become(true, term, 1) }) + h.barrier(term)
	},
	// become-leader term=T: member 1 leads term T, before its barrier.
	"become-leader": func(h *lmHarness, a scriptArgs) string {
		return h.do(func() { h.lm.Become(true, a.num("term", 2), 1) })
	},
	// barrier term=T: the first entry of term T applies.
	"barrier": func(h *lmHarness, a scriptArgs) string { return h.barrier(a.num("term", 2)) },
	// follow term=T leader=L
	"follow": func(h *lmHarness, a scriptArgs) string {
		return h.do(func() { h.lm.Become(false, a.num("term", 2), a.num("leader", 3)) })
	},
	// grant-by-other term=T key=K lease=MS: another member's Grant applies.
	"grant-by-other": func(h *lmHarness, a scriptArgs) string {
		res := h.foreign(a.num("term", 2), fsm.Command{Op: fsm.OpGrant, Key: a.key(), LeaseMS: a.num("lease", 1000)})
		return fmt.Sprintf("token %d", res.Token)
	},
	"acquire": func(h *lmHarness, a scriptArgs) string { return h.submit(a.request(OpAcquire)) },
	"release": func(h *lmHarness, a scriptArgs) string { return h.submit(a.request(OpRelease)) },
	"renew":   func(h *lmHarness, a scriptArgs) string { return h.submit(a.request(OpRenew)) },
	"get":     func(h *lmHarness, a scriptArgs) string { return h.submit(a.request(OpGet)) },
	// confirm h=H: the quorum read of call H is confirmed.
	"confirm": func(h *lmHarness, a scriptArgs) string { return h.confirm(a.num("h", 1), nil) },
	// abandon h=H key=K token=T: the caller of H left (token: the grant it
	// was sent, 0 if none).
	"abandon": func(h *lmHarness, a scriptArgs) string {
		return h.do(func() { h.lm.Abandon(a.num("h", 1), a.key(), a.num("token", 0)) })
	},
	// tick at=MS: the member's clock reads MS.
	"tick": func(h *lmHarness, a scriptArgs) string { return h.tick(a.ms("at", 0)) },
	// commit: the oldest proposal applies; commit-all: every one does.
	"commit":     func(h *lmHarness, _ scriptArgs) string { return h.commit() },
	"commit-all": func(h *lmHarness, _ scriptArgs) string { return h.commitAll() },
	// table key=K: what the applied table holds for K.
	"table": func(h *lmHarness, a scriptArgs) string { return h.holder(a.key()) },
}

// Package cliflag holds what the packages that register raftlock's command
// line flags share: the flag values more than one command uses (a seed
// drawn when not given, a boolean whose default depends on other flags,
// lists of integers), the lists they parse, and errors that carry the exit
// code the command ends with, so a package can say "bad flags" (exit 2)
// without knowing how the command line is run; and the parsing of a
// command's arguments, the environment's RAFTLOCK_* variables first.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Exit codes every command shares, as the README tables them.
const (
	ExitError = 1
	ExitUsage = 2
	// ExitInterrupted is a run stopped by Ctrl-C after writing what it
	// had (128+SIGINT, as a shell reports it).
	ExitInterrupted = 130
)

// Error is an error with the exit code its command ends with.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// WithCode gives err the exit code code.
func WithCode(code int, err error) error { return &Error{Code: code, Err: err} }

// Usagef is a usage error (exit 2): flags that cannot run.
func Usagef(format string, args ...any) error {
	return WithCode(ExitUsage, fmt.Errorf(format, args...))
}

// EnvName is the environment variable a flag is also read from:
// --some-name is RAFTLOCK_SOME_NAME.
func EnvName(flagName string) string {
	return "RAFTLOCK_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// SplitList splits a comma-separated list, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Counts parses flagName's comma-separated list of integers of at least
// least (a usage error otherwise).
func Counts(s, flagName string, least int) ([]int, error) {
	var out []int
	for _, c := range SplitList(s) {
		n, err := strconv.Atoi(c)
		if err != nil || n < least {
			return nil, Usagef("bad %s %q: want integers of at least %d", flagName, c, least)
		}
		out = append(out, n)
	}
	return out, nil
}

// ListenAddr checks that a listen address flag, when set, is HOST:PORT
// (the host may be empty, and port 0 picks a free port), so that a typo
// is a usage error and not a failure to listen after the member opened
// its data.
func ListenAddr(flagName, addr string) error {
	if _, ok := hostPort(addr); addr != "" && !ok {
		return Usagef("bad %s %q: want HOST:PORT", flagName, addr)
	}
	return nil
}

// hostPort reads the port of s, a host (possibly empty) and a port
// number; ok is false when s is not that.
func hostPort(s string) (port uint64, ok bool) {
	_, p, err := net.SplitHostPort(s)
	if err != nil {
		return 0, false
	}
	port, err = strconv.ParseUint(p, 10, 16)
	return port, err == nil
}

// Endpoints splits a comma-separated list of HOST:PORT addresses; a
// malformed one is a usage error before anything is dialled.
func Endpoints(s string) ([]string, error) {
	var eps []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if port, ok := hostPort(e); !ok || port == 0 {
			return nil, Usagef("bad endpoint %q in --endpoints: want HOST:PORT", e)
		}
		eps = append(eps, e)
	}
	if len(eps) == 0 {
		return nil, Usagef("--endpoints is empty")
	}
	return eps, nil
}

// Plural is "1 member", "3 members".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Seed is a --seed. Left unset, it shows as "random" in the help, which
// thus reads the same on every run, and Value draws one.
type Seed struct {
	v   uint64
	set bool
}

func (s *Seed) String() string {
	if s == nil || !s.set {
		return "random"
	}
	return strconv.FormatUint(s.v, 10)
}

func (s *Seed) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return errors.New("want a non-negative integer")
	}
	s.v, s.set = n, true
	return nil
}

// IsSet says whether the seed was given.
func (s *Seed) IsSet() bool { return s.set }

// Value is the seed given, or a new one drawn small enough to retype.
func (s *Seed) Value() uint64 {
	if !s.set {
		s.v, s.set = rand.Uint64N(1_000_000), true
	}
	return s.v
}

// OptBool is a boolean flag whose default depends on other flags: unset,
// it shows Def in the help, and Or gives the default the caller decides.
type OptBool struct {
	Def    string
	v, set bool
}

// Or is the flag's value, or def when it was not set.
func (b *OptBool) Or(def bool) bool {
	if !b.set {
		return def
	}
	return b.v
}

func (b *OptBool) String() string {
	if b == nil {
		return ""
	}
	if !b.set {
		return b.Def
	}
	return strconv.FormatBool(b.v)
}

func (b *OptBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	b.v, b.set = v, true
	return nil
}

func (b *OptBool) IsBoolFlag() bool { return true }

// IntList is a flag holding comma-separated positive integers, sorted.
type IntList []int

func (l *IntList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (l *IntList) Set(s string) error {
	*l = nil
	for _, p := range strings.Split(s, ",") {
		if p == "" {
			continue
		}
		v, err := strconv.Atoi(p)
		if err != nil || v < 1 {
			return fmt.Errorf("want positive integers separated by commas, got %q", p)
		}
		*l = append(*l, v)
	}
	slices.Sort(*l)
	return nil
}

// Registrar is a command's flags: a package's Command or Flags.
type Registrar interface{ RegisterFlags(fs *flag.FlagSet) }

// Parse defines r's flags on a new flag set named name and parses args
// into them, for a Go program (or a test) that runs a command's flags
// without the CLI; errors are returned, never printed.
func Parse(r Registrar, name string, args ...string) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r.RegisterFlags(fs)
	return fs, fs.Parse(args)
}

// ShortDuration spells d as a user types it: 1h, not 1h0m0s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Given says whether flag name was set, on the command line or in the
// environment.
func Given(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// flagInMessage is a flag name as the flag package writes it in errors.
var flagInMessage = regexp.MustCompile(`(^|\s)-([A-Za-z][\w-]*)`)

// DashDash spells the flag names of a flag package error --name, as every
// command's help does.
func DashDash(msg string) string { return flagInMessage.ReplaceAllString(msg, "$1--$2") }

// ArgErr is a usage error of fs's command, with where to find its usage.
func ArgErr(fs *flag.FlagSet, format string, args ...any) error {
	return Usagef("%s (see raftlock %s --help)", fmt.Sprintf(format, args...), fs.Name())
}

// ParseArgs parses a command's args into fs: first every flag whose
// RAFTLOCK_* variable is set (SetFromEnv), then the command line, which
// wins. It returns the positional arguments and, after a "--", the rest
// (nil when there is no "--"). A flag that does not parse is a one-line
// usage error naming the command's --help; --help prints the usage to
// stderr and returns flag.ErrHelp.
func ParseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (pos, rest []string, err error) {
	fs.SetOutput(stderr)
	if err := SetFromEnv(fs); err != nil {
		return nil, nil, err
	}
	if onCommandLine(args, "data") && onCommandLine(args, "dir") {
		// One variable: the later would win, silently.
		return nil, nil, ArgErr(fs, "--dir is an alias of --data: give one of them")
	}
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			if rest == nil {
				rest = []string{}
			}
			break
		}
	}
	// The flag package prints its error and the whole usage; a bad flag
	// gets one line instead, and --help the usage.
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(stderr)
	for {
		if err := fs.Parse(args); err != nil {
			fs.SetOutput(stderr)
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return nil, nil, err
			}
			return nil, nil, ArgErr(fs, "%s", DashDash(err.Error()))
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, rest, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// SetFromEnv sets every flag of fs whose RAFTLOCK_* variable is set.
func SetFromEnv(fs *flag.FlagSet) error {
	_, data := os.LookupEnv(EnvName("data"))
	_, dir := os.LookupEnv(EnvName("dir"))
	if data && dir && fs.Lookup("data") != nil && fs.Lookup("dir") != nil {
		return Usagef("%s is an alias of %s: set one of them", EnvName("dir"), EnvName("data"))
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := os.LookupEnv(EnvName(f.Name))
		if !ok || err != nil {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = Usagef("%s=%q: %v", EnvName(f.Name), v, serr)
		}
	})
	return err
}

// onCommandLine says whether flag name is given in args (before any "--"),
// in any of the flag package's spellings.
func onCommandLine(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// PrintDefaults is flag.PrintDefaults with the --name spelling the
// README and the synopses use.
func PrintDefaults(fs *flag.FlagSet) {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if name != "" {
			fmt.Fprintf(&b, " %s", name)
		}
		fmt.Fprintf(&b, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	io.WriteString(fs.Output(), b.String())
}

// Command raftlock runs raftlock cluster members and talks to a cluster:
// acquire, release, renew, get, exec and status, plus the chaos harness,
// the history checker and the benchmark.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/cliflag"
)

// Exit codes, as the README tables them.
const (
	exitOK         = 0
	exitError      = cliflag.ExitError
	exitUsage      = cliflag.ExitUsage
	exitHeld       = 3
	exitNotOwner   = 4
	exitUnknown    = 5
	exitPermission = 6 // the cluster's ACL refused the call

	// exec, as shells do: the command cannot run, or was not found (a death
	// by signal n exits 128+n).
	exitCannotRun = 126
	exitNotFound  = 127

	// A run stopped by Ctrl-C after writing what it had (128+SIGINT).
	exitInterrupted = cliflag.ExitInterrupted
)

// withCode carries an exit code with its one-line message.
func withCode(code int, err error) error { return cliflag.WithCode(code, err) }

func usageErr(format string, args ...any) error { return cliflag.Usagef(format, args...) }

type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"node", "run one cluster member", runNode},
		{"cluster", "run a local cluster on the default ports until Ctrl-C", runCluster},
		{"acquire", "acquire a lock and print its fencing token", runAcquire},
		{"release", "release a lock held with a token (--force: an operator's, whatever the token)", runRelease},
		{"renew", "renew the lease of a lock held with a token", runRenew},
		{"get", "read a lock: holder's token, owner and lease left (linearizable)", runGet},
		{"list", "list the held locks under a prefix, paged (linearizable)", runList},
		{"watch", "print each change to the locks under a prefix as it applies, until Ctrl-C", runWatch},
		{"exec", "run a command while holding a lock", runExec},
		{"status", "show every member's raft status", runStatus},
		{"member", "list, add, promote or remove members (member list|add|promote|remove)", runMember},
		{"leader", "hand leadership to another member (leader transfer [--to N])", runLeader},
		{"snapshot", "back up the lock table to a file, or seed a new member from one (save, restore)", runSnapshot},
		{"certs", "make a CA and member and client certificates (init), or sign one more with it (add-client, add-member)", runCerts},
		{"version", "print the version, commit and Go version", runVersion},
		{"completion", "print a shell completion script (bash or zsh)", runCompletion},
		{"chaos", "run a cluster under faults, record a history and check it", runChaos},
		{"check", "check a recorded history (linearizability, fencing, leases, resource)", runCheck},
		{"bench", "measure throughput and latency, against the physical floor and peers", runBench},
		{"sim", "simulate a cluster deterministically under faults, one seed or a swarm, and check it", runSim},
	}
}

// hiddenCommands run but are not listed: the harness starts them.
func hiddenCommands() []command {
	return []command{
		{"chaos-client", "one workload client of raftlock chaos --client-procs", runChaosClient},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: raftlock COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	all := commands()
	width := 0
	for _, c := range all {
		width = max(width, len(c.name))
	}
	for _, c := range all {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'raftlock COMMAND --help' for a command's flags.")
	fmt.Fprintln(w, "Endpoints come from --endpoints or RAFTLOCK_ENDPOINTS (default "+defaultEndpoints+");")
	fmt.Fprintln(w, "every flag --some-name may also be set as RAFTLOCK_SOME_NAME.")
	fmt.Fprintln(w, "\nExit codes: 0 ok, 1 error, 2 usage, 3 held, 4 not the holder, 5 outcome unknown,")
	fmt.Fprintln(w, "6 permission denied (the cluster's ACL). chaos, check and sim have their own:")
	fmt.Fprintln(w, "0 valid, 1 a violation found, 2 unknown, 3 the harness failed or bad flags.")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	if args[0] == "help" && len(args) > 1 {
		args = append(args[1:], "--help") // help CMD [SUB]: as CMD [SUB] --help
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return exitOK
	}
	if args[0] == "--version" {
		args = []string{"version"}
	}
	if args[0] == completeCommand {
		complete(args[1:], stdout)
		return exitOK
	}
	for _, c := range append(commands(), hiddenCommands()...) {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		if err == nil || errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		var ee *cliflag.Error
		code := exitError
		if errors.As(err, &ee) {
			code = ee.Code
		}
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		msg = strings.ReplaceAll(msg, "raftlock: ", "")
		if msg != "" {
			fmt.Fprintf(stderr, "raftlock %s: %s\n", c.name, msg)
		}
		return code
	}
	fmt.Fprintf(stderr, "raftlock: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

// parse parses flags that may stand before, between or after positional
// arguments (raftlock acquire KEY --lease 5s). Everything after a bare "--"
// is returned as rest, untouched.
// parse is cliflag.ParseArgs, refusing then the durations no command can mean.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) (pos, rest []string, err error) {
	if pos, rest, err = cliflag.ParseArgs(fs, args, stderr); err != nil {
		return nil, nil, err
	}
	return pos, rest, checkDurations(fs)
}

// checkDurations refuses, as usage errors, the durations no command can
// mean: a negative one (--wait -1s would otherwise pass as 0), a --timeout
// of 0 (the call would give up before it is sent) and a --lease the
// cluster refuses, so a bad value exits 2 whether or not it parses.
func checkDurations(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || err != nil {
			return
		}
		d, ok := g.Get().(time.Duration)
		if !ok {
			return
		}
		switch {
		case d < 0:
			err = argErr(fs, "--%s %v: a duration must not be negative", f.Name, d)
		case f.Name == "timeout" && d == 0:
			err = argErr(fs, "--timeout %v: must be more than 0", d)
		case f.Name == "lease" && wire.ValidateLease(d.Milliseconds()) != nil:
			err = argErr(fs, "--lease %s: must be %s..%s", cliflag.ShortDuration(d), cliflag.ShortDuration(minLease), cliflag.ShortDuration(maxLease))
		}
	})
	return err
}

// The lease bounds every member enforces (client/wire), as flags spell them.
const (
	minLease = wire.MinLeaseMS * time.Millisecond
	maxLease = wire.MaxLeaseMS * time.Millisecond
)

func argErr(fs *flag.FlagSet, format string, args ...any) error {
	return cliflag.ArgErr(fs, format, args...)
}

// parseNoArgs parses a command that takes flags only.
func parseNoArgs(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	pos, _, err := parse(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return argErr(fs, "unexpected argument %q", pos[0])
	}
	return nil
}

// oneKey parses a command that takes exactly one KEY argument.
func oneKey(fs *flag.FlagSet, args []string, stderr io.Writer) (string, error) {
	return oneArg(fs, args, stderr, "KEY")
}

// oneArg parses a command that takes exactly one argument, named what.
func oneArg(fs *flag.FlagSet, args []string, stderr io.Writer, what string) (string, error) {
	pos, rest, err := parse(fs, args, stderr)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 || rest != nil {
		return "", argErr(fs, "want exactly one %s", what)
	}
	return pos[0], nil
}

// packageFlags makes the flag set of a command whose flags its package
// defines (register) and parses args with parse: parseNoArgs, or
// parseHarnessNoArgs for a harness command.
func packageFlags(name, synopsis string, register func(*flag.FlagSet), parse func(*flag.FlagSet, []string, io.Writer) error, args []string, stderr io.Writer) (*flag.FlagSet, error) {
	fs := newFlagSet(name, synopsis)
	register(fs)
	return fs, parse(fs, args, stderr)
}

func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: raftlock %s\n", synopsis)
		if strings.Contains(synopsis, " KEY") {
			// The bounds every member enforces, from the constants it
			// enforces them with.
			limits := fmt.Sprintf("KEY is %d..%d bytes of UTF-8 without NUL", 1, wire.MaxKeyLen)
			if fs.Lookup("lease") != nil {
				limits += fmt.Sprintf("; --lease is %s..%s", cliflag.ShortDuration(minLease), cliflag.ShortDuration(maxLease))
			}
			fmt.Fprintf(fs.Output(), "\n%s.\n", limits)
		}
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(fs.Output(), "\nflags (each --some-name also read from RAFTLOCK_SOME_NAME):\n")
			cliflag.PrintDefaults(fs)
		}
	}
	return fs
}

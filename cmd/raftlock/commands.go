package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/tlsconfig"
)

const defaultEndpoints = "127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003"

// clientFlags are shared by every command that talks to a cluster.
type clientFlags struct {
	endpoints string
	json      bool
	timeout   time.Duration
	tls       tlsconfig.Files
}

// register adds --endpoints and --timeout; queries add --json too.
func (c *clientFlags) register(fs *flag.FlagSet, query bool) {
	def := os.Getenv("RAFTLOCK_ENDPOINTS")
	if def == "" {
		def = defaultEndpoints
	}
	fs.StringVar(&c.endpoints, "endpoints", def, "comma-separated client addresses (env RAFTLOCK_ENDPOINTS)")
	if query {
		fs.BoolVar(&c.json, "json", false, "print JSON")
	}
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up after this long")
	c.tls.RegisterClientFlags(fs)
}

func (c *clientFlags) client() (*client.Client, error) { return c.clientAs("") }

// connect is client and a context that ends after --timeout plus extra
// (an acquire's --wait); done closes both.
func (c *clientFlags) connect(extra time.Duration) (*client.Client, context.Context, func(), error) {
	cl, err := c.client()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), extra+c.timeout)
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

// clientAs is client, recording owner with every lock it acquires.
func (c *clientFlags) clientAs(owner string) (*client.Client, error) {
	eps, err := cliflag.Endpoints(c.endpoints)
	if err != nil {
		return nil, err
	}
	tc, err := c.tls.ClientConfig()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(eps, client.Options{TLS: tc, Owner: owner})
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	return cl, nil
}

// fail reports a failed call about a lock: with --json, also as
// {"key","error","message"} on stdout (error: held, not-found,
// outcome-unknown, invalid-argument or error), key included even when it
// is the empty key the cluster refused, so a script reads the outcome from
// one place; the exit code is clientErr's either way.
func (c *clientFlags) fail(stdout io.Writer, key string, err error) error {
	return c.failJSON(stdout, map[string]any{"key": key}, err)
}

// failNoKey is fail for a call about no one key (admin calls, list):
// {"error","message"}.
func (c *clientFlags) failNoKey(stdout io.Writer, err error) error {
	return c.failJSON(stdout, map[string]any{}, err)
}

func (c *clientFlags) failJSON(stdout io.Writer, out map[string]any, err error) error {
	err = c.timedOut(err)
	if c.json {
		code := wire.ErrorNameError
		var inv *client.InvalidArgumentError
		switch {
		case errors.Is(err, client.ErrHeld):
			code = wire.ErrorNameHeld
		case errors.Is(err, client.ErrNotFound):
			code = wire.ErrorNameNotFound
		case errors.Is(err, client.ErrOutcomeUnknown):
			code = wire.ErrorNameOutcomeUnknown
		case errors.As(err, &inv):
			code = wire.ErrorNameInvalidArgument
		case errors.Is(err, client.ErrPermissionDenied):
			code = wire.ErrorNamePermissionDenied
		}
		out["error"], out["message"] = code, strings.TrimPrefix(err.Error(), "raftlock: ")
		printJSON(stdout, out)
	}
	return clientErr(err)
}

// timedOut says what ran out when err ended at the --timeout deadline:
// the context's own "context deadline exceeded" names no flag.
func (c *clientFlags) timedOut(err error) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &timeoutError{timeout: c.timeout, err: err}
}

// timeoutError is a call that got no answer within --timeout; it wraps
// the client's error, so the exit code stays that error's (outcome
// unknown for a lock-changing call sent before the deadline).
type timeoutError struct {
	timeout time.Duration
	err     error
}

func (e *timeoutError) Unwrap() error { return e.err }

func (e *timeoutError) Error() string {
	msg := "no answer within --timeout " + cliflag.ShortDuration(e.timeout)
	if errors.Is(e.err, client.ErrOutcomeUnknown) {
		return "outcome unknown: " + msg + " (the call was sent: it may have applied)"
	}
	// The client's last failure before the deadline, if any, says why.
	deadline := context.DeadlineExceeded.Error()
	last := strings.TrimSuffix(e.err.Error(), " ("+deadline+")")
	last = strings.TrimSuffix(strings.TrimSuffix(last, deadline), ": ")
	if last = strings.TrimPrefix(last, "gave up at the deadline: "); last != "" {
		msg += " (last: " + strings.TrimPrefix(last, "raftlock: ") + ")"
	}
	return msg
}

// clientErr maps a client error to its exit code; an error that has one
// keeps it.
func clientErr(err error) error {
	var coded *cliflag.Error
	switch {
	case errors.As(err, &coded):
		return err
	case errors.Is(err, client.ErrHeld):
		return withCode(exitHeld, err)
	case errors.Is(err, client.ErrNotFound):
		return withCode(exitNotOwner, err)
	case errors.Is(err, client.ErrOutcomeUnknown):
		return withCode(exitUnknown, err)
	case errors.Is(err, client.ErrPermissionDenied):
		return withCode(exitPermission, err)
	}
	return withCode(exitError, err)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
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

func runAcquire(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("acquire", "acquire KEY [--lease 10s] [--wait 0s] [--owner TEXT] [--json]")
	var cf clientFlags
	cf.register(fs, true)
	lease := fs.Duration("lease", 10*time.Second, "lease length (10ms..1h)")
	wait := fs.Duration("wait", 0, "queue for the lock this long (0: fail at once when held)")
	owner := ownerFlag(fs)
	fs.Lookup("timeout").Usage += " (after --wait)"
	key, err := oneKey(fs, args, stderr)
	if err != nil {
		return err
	}
	if err := checkOwner(owner, fs); err != nil {
		return err
	}
	cl, ctx, done, err := cf.connect(*wait)
	if err != nil {
		return err
	}
	defer done()
	// Ctrl-C gives a wait up (also when started with SIGINT ignored, by a
	// script's &): the member leaves the queue, or releases a grant that
	// reaches it after the caller left (rule 7).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	g, err := untilSignal(ctx, sigs, func(ctx context.Context) (client.Grant, error) {
		return cl.AcquireWith(ctx, client.AcquireRequest{Key: key, Lease: *lease, Wait: *wait, Owner: *owner})
	}, func(g client.Grant) {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		cl.Release(rctx, key, g.Token)
	})
	var se signalError
	if errors.As(err, &se) {
		return withCode(128+int(se.sig), fmt.Errorf("%v while waiting for %s: not acquired", se.sig, key))
	}
	if err != nil {
		return cf.fail(stdout, key, err)
	}
	if cf.json {
		return printJSON(stdout, map[string]any{"key": key, "token": g.Token, "lease_ms": g.LeaseMS, "owner": *owner})
	}
	fmt.Fprintf(stdout, "acquired %s: token %d, lease %v\n", key, g.Token, time.Duration(g.LeaseMS)*time.Millisecond)
	return nil
}

func runRelease(args []string, stdout, stderr io.Writer) error {
	return runHolderCommand("release", args, stdout, stderr)
}

func runRenew(args []string, stdout, stderr io.Writer) error {
	return runHolderCommand("renew", args, stdout, stderr)
}

// tokenErr is the usage error of a release or renew without a token: a
// --token 0 was given, but no grant ever has token 0.
func tokenErr(fs *flag.FlagSet) error {
	if cliflag.Given(fs, "token") {
		return argErr(fs, "--token 0: tokens start at 1; give the token acquire printed")
	}
	return argErr(fs, "--token is required: the token acquire printed")
}

// runHolderCommand is release and renew: calls made by the holder, with
// its token, answered "not the holder" (exit 4) otherwise.
func runHolderCommand(name string, args []string, stdout, stderr io.Writer) error {
	synopsis := "release KEY --token N [--json]\n       raftlock release KEY --force [--json]   (an operator's: needs the admin right)"
	if name == "renew" {
		synopsis = "renew KEY --token N [--lease 10s] [--json]"
	}
	fs := newFlagSet(name, synopsis)
	var cf clientFlags
	cf.register(fs, true)
	token := fs.Uint64("token", 0, "the holder's fencing token (required)")
	var lease *time.Duration
	force := new(bool)
	if name == "renew" {
		lease = fs.Duration("lease", 10*time.Second, "new lease length from now (10ms..1h)")
	} else {
		fs.BoolVar(force, "force", false, "free the lock whatever its token (an operator's; needs the ACL's admin right, exit 6 without it)")
	}
	key, err := oneKey(fs, args, stderr)
	if err != nil {
		return err
	}
	if *force {
		if *token != 0 {
			return usageErr("--force releases whatever token holds the key: give --token or --force, not both")
		}
		return forceRelease(cf, key, stdout)
	}
	if *token == 0 {
		return tokenErr(fs)
	}
	cl, ctx, done, err := cf.connect(0)
	if err != nil {
		return err
	}
	defer done()
	if name == "renew" {
		err = cl.Renew(ctx, key, *token, *lease)
	} else {
		err = cl.Release(ctx, key, *token)
	}
	if err != nil {
		return cf.fail(stdout, key, err)
	}
	switch {
	case cf.json && name == "renew":
		return printJSON(stdout, map[string]any{"key": key, "token": *token, "lease_ms": lease.Milliseconds()})
	case cf.json:
		return printJSON(stdout, map[string]any{"key": key, "token": *token, "released": true})
	case name == "renew":
		fmt.Fprintf(stdout, "renewed %s (token %d) for %v\n", key, *token, *lease)
	default:
		fmt.Fprintf(stdout, "released %s (token %d)\n", key, *token)
	}
	return nil
}

func runGet(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("get", "get KEY [--stale] [--json]")
	var cf clientFlags
	cf.register(fs, true)
	stale := fs.Bool("stale", false, "read any member's local state (fast, possibly stale)")
	key, err := oneKey(fs, args, stderr)
	if err != nil {
		return err
	}
	cl, ctx, done, err := cf.connect(0)
	if err != nil {
		return err
	}
	defer done()
	var info client.LockInfo
	if *stale {
		info, err = cl.GetStale(ctx, key)
	} else {
		info, err = cl.Get(ctx, key)
	}
	if err != nil {
		return cf.fail(stdout, key, err)
	}
	if cf.json {
		out := map[string]any{"key": key, "held": info.Held, "token": info.Token, "remaining_ms": info.RemainingMS}
		if info.Held {
			out["owner"] = info.Owner
		}
		return printJSON(stdout, out)
	}
	if !info.Held {
		fmt.Fprintf(stdout, "%s is free\n", key)
		return nil
	}
	by := ""
	if info.Owner != "" {
		by = " by " + info.Owner
	}
	fmt.Fprintf(stdout, "%s is held%s: token %d, %v of lease left\n", key, by, info.Token, time.Duration(info.RemainingMS)*time.Millisecond)
	return nil
}

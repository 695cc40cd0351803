package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/tlsconfig"
)

const defaultEndpoints = "127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003"

// clientFlags are shared by every command that talks to a cluster:
// --endpoints, --timeout, TLS and --json; clientErr gives a client error's
// exit code.
type clientFlags struct {
	endpoints string
	json      bool
	timeout   time.Duration
	tls       tlsconfig.Files
}

// clientFlagSet is the flag set of a command that talks to a cluster, its
// clientFlags registered.
func clientFlagSet(name, synopsis string, query bool) (*flag.FlagSet, *clientFlags) {
	fs, cf := newFlagSet(name, synopsis), &clientFlags{}
	cf.register(fs, query)
	return fs, cf
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
		case errors.Is(err, client.ErrCompacted):
			code = wire.ErrorNameCompacted
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

func printJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// failLocal is failNoKey for a command that needs no cluster (snapshot
// restore, certs init): with --json it prints a failure other than a
// usage error (which stays on stderr, as every command's) as
// {"error":"error","message"}.
func failLocal(asJSON bool, stdout io.Writer, err error) error {
	var coded *cliflag.Error
	if asJSON && !(errors.As(err, &coded) && coded.Code == exitUsage) {
		printJSON(stdout, map[string]any{"error": wire.ErrorNameError, "message": err.Error()})
	}
	return err
}

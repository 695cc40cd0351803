package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/cliflag"
)

func runAcquire(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("acquire", "acquire KEY [--lease 10s] [--wait 0s] [--owner TEXT] [--json]", true)
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
	sigs, stop := notify(giveUpSignals()...)
	defer stop()
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
	fs, cf := clientFlagSet(name, synopsis, true)
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
	fs, cf := clientFlagSet("get", "get KEY [--stale] [--json]", true)
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

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/cliflag"
)

// runWatch prints the lock events under a prefix, one line each, until
// Ctrl-C (exit 0) or the member ends the watch (a one-line error, exit 1).
func runWatch(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("watch", "watch PREFIX [--after INDEX.SEQ] [--json]", true)
	fs.Lookup("json").Usage = `print each event as one JSON object {"key","type","token","owner","lease_ms","index","seq"} (seq when not 0), as the HTTP API's /v1/watch`
	afterFlag := fs.String("after", "", "resume after this event's revision, INDEX.SEQ (an event's index and seq): every event since first, or an error when no member still holds them (empty: from now)")
	fs.Lookup("timeout").Usage = "give up starting the watch after this long (a started watch runs until Ctrl-C)"
	prefix, err := oneArg(fs, args, stderr, "PREFIX")
	if err != nil {
		return err
	}
	var after wire.Revision
	if *afterFlag != "" {
		if after, err = wire.ParseRevision(*afterFlag); err != nil {
			return argErr(fs, "--after: %v", err)
		}
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, stop := untilInterrupted()
	defer stop()
	w, err := startWatch(ctx, cl, prefix, after, cf.timeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C before it started
		}
		return cf.failNoKey(stdout, err)
	}
	for ev := range w.C {
		if cf.json {
			printJSON(stdout, ev)
			continue
		}
		by := ""
		if ev.Owner != "" {
			by = " by " + ev.Owner
		}
		rev := strconv.FormatUint(ev.Index, 10)
		if ev.Seq != 0 {
			rev = ev.Revision().String()
		}
		fmt.Fprintf(stdout, "%s %s %s token %d lease %v%s\n", rev, ev.Type, ev.Key, ev.Token, time.Duration(ev.LeaseMS)*time.Millisecond, by)
	}
	if ctx.Err() != nil {
		return nil // Ctrl-C: the watch's one way to end well
	}
	return cf.failNoKey(stdout, fmt.Errorf("watch ended: %w", w.Err()))
}

// startWatch starts a watch that lasts as long as ctx, giving up its start
// after timeout.
func startWatch(ctx context.Context, cl *client.Client, prefix string, after wire.Revision, timeout time.Duration) (*client.Watch, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	errTimeout := errors.New("no member started the watch within --timeout " + cliflag.ShortDuration(timeout))
	t := time.AfterFunc(timeout, func() { cancel(errTimeout) })
	w, err := cl.WatchAfter(wctx, prefix, after)
	if !t.Stop() {
		if err == nil {
			cancel(errTimeout)
		}
		return nil, errTimeout
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	return w, nil
}

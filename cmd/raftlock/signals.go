package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/raftlock/raftlock/node/embed"
)

// untilInterrupted is a context that ends at Ctrl-C or SIGTERM, for a
// run that writes what it has before it ends; stop restores the signals'
// default, so a second Ctrl-C ends the process at once.
func untilInterrupted() (ctx context.Context, stop func()) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// signalError is a wait given up on a signal.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return e.sig.String() }

// untilSignal runs call, giving it up when a signal comes on sigs first:
// its context is cancelled, and what it did anyway (a lock granted as the
// signal came) is undone, since nothing will use it. The error is then a
// signalError.
func untilSignal[T any](ctx context.Context, sigs <-chan os.Signal, call func(context.Context) (T, error), undo func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan result, 1)
	go func() {
		v, err := call(ctx)
		res <- result{v, err}
	}()
	select {
	case r := <-res:
		return r.v, r.err
	case s := <-sigs:
		cancel()
		if r := <-res; r.err == nil {
			undo(r.v)
		}
		sig, _ := s.(syscall.Signal)
		var zero T
		return zero, signalError{sig}
	}
}

// notify relays sigs to the channel it returns until stop is called.
func notify(sigs ...os.Signal) (ch <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, sigs...)
	return c, func() { signal.Stop(c) }
}

// The signals the CLI catches: Ctrl-C and SIGTERM stop a process; a
// terminal's SIGHUP also gives up a wait for a lock; exec passes SIGQUIT
// on to its command as well.
func stopSignals() []os.Signal   { return []os.Signal{syscall.SIGINT, syscall.SIGTERM} }
func giveUpSignals() []os.Signal { return append(stopSignals(), syscall.SIGHUP) }
func relaySignals() []os.Signal  { return append(giveUpSignals(), syscall.SIGQUIT) }

// waitForSignal waits for Ctrl-C or SIGTERM, and says which came.
func waitForSignal() os.Signal {
	ch, stop := notify(stopSignals()...)
	defer stop()
	return <-ch
}

// reloadOnHUP reloads certificates and ACL on every SIGHUP until ctx ends.
func reloadOnHUP(ctx context.Context, mbs []*embed.Member) {
	ch, stop := notify(syscall.SIGHUP)
	go func() {
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				for _, mb := range mbs {
					mb.Reload()
				}
			}
		}
	}()
}

package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node/nodetest"
)

// leaderLocks is the number of locks the leader's table holds.
func leaderLocks(ctx context.Context, cl *client.Client, eps []string) (uint64, error) {
	for _, ep := range eps {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cl.Status(sctx, ep)
		cancel()
		if err == nil && st.Role == "leader" {
			return st.Locks, nil
		}
	}
	return 0, errors.New("no leader answered")
}

// Every workload, run to its end or cut off by its context, leaves no lock
// of the bench held on a cluster it did not start: the leases are an hour,
// so a lock still held when the wait ends was left behind, not expiring.
func TestMeasureOnEndpointsLeavesNoLockHeld(t *testing.T) {
	c := nodetest.New(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	target, err := RaftlockEndpoints(ctx, c.Endpoints(), time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	cl, err := client.New(c.Endpoints(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	noneHeld := func(what string) {
		t.Helper()
		var n uint64
		nodetest.WaitFor(t, 30*time.Second, what+": no lock held", func() bool {
			var err error
			n, err = leaderLocks(ctx, cl, c.Endpoints())
			return err == nil && n == 0
		})
	}
	for _, w := range []string{Uncontended, Contended, Mixed} {
		spec := Spec{Workload: w, Clients: 32, Duration: 300 * time.Millisecond, HotKeys: 2}
		if _, err := Measure(ctx, target, spec, nil); err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		noneHeld(w + " to its end")

		// Interrupted (Ctrl-C cancels the context) while the clients hold
		// locks and have acquires in flight.
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			spec.Duration = time.Minute
			_, err := Measure(rctx, target, spec, nil)
			done <- err
		}()
		nodetest.WaitFor(t, 30*time.Second, w+": locks held", func() bool {
			n, err := leaderLocks(ctx, cl, c.Endpoints())
			return err == nil && n > 0
		})
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("%s interrupted: %v, want context.Canceled", w, err)
		}
		noneHeld(w + " interrupted")
	}
}

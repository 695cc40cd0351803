package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// stuckTarget's calls never end until the run stops them: a member that
// answers every call overloaded, which the client retries.
type stuckTarget struct{}

func (stuckTarget) Name() string { return "stuck" }
func (stuckTarget) NewSession(context.Context, int) (Session, error) {
	return stuckSession{}, nil
}
func (stuckTarget) PIDs() []int                                 { return nil }
func (stuckTarget) RaftStats(context.Context) (RaftStats, bool) { return RaftStats{}, false }
func (stuckTarget) Close() error                                { return nil }

type stuckSession struct{}

func (stuckSession) Lock(ctx context.Context, _ string, _ bool) (func(context.Context) error, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (stuckSession) Read(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
func (stuckSession) Close() error                             { return nil }

// A window in which no call ends has no ops and no errors; its progress
// line says the calls are unanswered instead of reading as an idle
// cluster.
func TestProgressShowsCallsThatNeverEnd(t *testing.T) {
	var progress bytes.Buffer
	run, err := Measure(t.Context(), stuckTarget{}, Spec{Workload: Uncontended, Clients: 3, Duration: 2500 * time.Millisecond}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if run.Ops != 0 || run.Errors != 0 {
		t.Errorf("ops %d, errors %d: want none", run.Ops, run.Errors)
	}
	if !strings.Contains(progress.String(), "3 calls unanswered for over 1s") {
		t.Errorf("progress does not name the unanswered calls:\n%s", progress.String())
	}
}

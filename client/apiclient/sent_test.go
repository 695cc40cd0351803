package apiclient

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/stats"
)

// A call is sent once its message went out, and no longer so when gRPC
// retries it transparently: that retry follows only an attempt the member
// never read, so only the retry's own message can have reached it.
func TestSentFollowsTransparentRetries(t *testing.T) {
	var sent atomic.Bool
	ctx := context.WithValue(context.Background(), sentKey{}, &sent)
	var h sentTracker
	for _, step := range []struct {
		stats stats.RPCStats
		want  bool
	}{
		{&stats.Begin{Client: true}, false},
		{&stats.OutPayload{Client: true}, true},
		{&stats.Begin{Client: true, IsTransparentRetryAttempt: true}, false},
		{&stats.OutPayload{Client: true}, true},
		{&stats.InPayload{Client: true}, true},
	} {
		h.HandleRPC(ctx, step.stats)
		if sent.Load() != step.want {
			t.Fatalf("after %T%+v: sent %v, want %v", step.stats, step.stats, sent.Load(), step.want)
		}
	}
}

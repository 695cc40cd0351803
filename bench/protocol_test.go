package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/node/nodetest"
)

// The raftlock target's sessions measure the same workload over each
// protocol: through the API port for gRPC and HTTP/JSON.
func TestSessionsSpeakEachProtocol(t *testing.T) {
	// Every call must succeed: a leader change under one would rightly
	// end it outcome-unknown.
	c, apis := nodetest.NewWithAPI(t, 3, nodetest.RareElections)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var addrs []string
	for _, id := range c.IDs() {
		addrs = append(addrs, apis[id])
	}
	for _, protocol := range apiclient.Protocols() {
		target, err := RaftlockEndpoints(ctx, c.Endpoints(), 10*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		rt := target.(*raftlockTarget)
		if rt.calls, err = dialCalls(protocol, rt.cl, addrs, nil); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{apiclient.ProtocolBinary: "*client.Client", apiclient.ProtocolGRPC: "*apiclient.GRPC", apiclient.ProtocolHTTP: "*apiclient.HTTP"}[protocol]
		if got := fmt.Sprintf("%T", rt.calls); got != want {
			t.Errorf("%s: sessions call a %s, want a %s", protocol, got, want)
		}
		// As StartRaftlock probes: the API client's connections are up.
		if _, err := rt.calls.Get(ctx, "bench-probe"); err != nil {
			t.Fatalf("%s: %v", protocol, err)
		}
		r, err := Measure(ctx, target, Spec{Workload: Mixed, Clients: 4, Duration: 700 * time.Millisecond, Warmup: 100 * time.Millisecond, HotKeys: 1}, nil)
		if err != nil || r.Ops == 0 || r.Errors > 0 {
			t.Errorf("%s: %+v, %v", protocol, r, err)
		}
		target.Close()
	}
}

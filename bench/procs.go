package bench

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/procgroup"
)

// shareCores gives each of n Go server processes its share of this
// machine's cores, as if each ran on a machine of its own: without it three
// replicas on two cores spend their time in each other's idle spinning
// (measured: 1-client p50 2.3 ms with GOMAXPROCS=2 per member, 1.7 ms with 1).
func shareCores(n int) []string {
	return []string{fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/max(n, 1)))}
}

// freePorts picks n free ports, all different: drawn before anything
// listens on them, two draws could otherwise land on the same one.
func freePorts(n int) ([]int, error) {
	var picker freeport.Picker
	ports := make([]int, n)
	for i := range ports {
		addr, err := picker.Addr()
		if err != nil {
			return nil, err
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if ports[i], err = strconv.Atoi(port); err != nil {
			return nil, err
		}
	}
	return ports, nil
}

// waitUntil polls ready until it succeeds or ctx ends.
func waitUntil(ctx context.Context, what string, ready func(context.Context) error) error {
	return procgroup.WaitUntil(ctx, what, ready)
}

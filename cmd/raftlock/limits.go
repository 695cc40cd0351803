package main

import (
	"flag"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/server"
)

// limitFlags are a member's resource limits (README, Limits) and --debug.
type limitFlags struct {
	maxConnections     int
	maxInflightPerConn int
	maxPending         int
	maxWaiters         int
	maxWaitersPerKey   int
	maxKeys            int
	debug              bool
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&l.maxConnections, "max-connections", server.DefaultMaxConns, "open client connections; one more is closed before the greeting (the client retries)")
	fs.IntVar(&l.maxInflightPerConn, "max-inflight-per-conn", server.DefaultMaxInflightPerConn, "waiting acquires open on one client connection (one more is answered overloaded), and as many other requests (past them the member stops reading that connection)")
	fs.IntVar(&l.maxPending, "max-pending", node.DefaultMaxPending, "calls open in the member (queued, proposed, waiting); one more is answered overloaded")
	fs.IntVar(&l.maxWaiters, "max-waiters", node.DefaultMaxWaiters, "waiting acquires over all keys; one more is answered overloaded")
	fs.IntVar(&l.maxWaitersPerKey, "max-waiters-per-key", node.DefaultMaxWaitersPerKey, "waiting acquires on one key; one more is answered overloaded")
	fs.IntVar(&l.maxKeys, "max-keys", node.DefaultMaxKeys, "keys held; an acquire of one more key is answered overloaded")
	fs.BoolVar(&l.debug, "debug", false, "serve Go's /debug/pprof profiles on the --http port")
}

func (l *limitFlags) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"max-connections", l.maxConnections}, {"max-inflight-per-conn", l.maxInflightPerConn}, {"max-pending", l.maxPending},
		{"max-waiters", l.maxWaiters}, {"max-waiters-per-key", l.maxWaitersPerKey}, {"max-keys", l.maxKeys}} {
		if f.v <= 0 {
			return usageErr("--%s must be > 0, got %d", f.name, f.v)
		}
	}
	return nil
}

func (l *limitFlags) node() node.Limits {
	return node.Limits{MaxPending: l.maxPending, MaxWaiters: l.maxWaiters, MaxWaitersPerKey: l.maxWaitersPerKey, MaxKeys: l.maxKeys}
}

func (l *limitFlags) server() server.Limits {
	return server.Limits{MaxConns: l.maxConnections, MaxInflightPerConn: l.maxInflightPerConn}
}

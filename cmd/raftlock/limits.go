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

// intFlag is one limit's flag: its name, value, default and usage.
type intFlag struct {
	name  string
	v     *int
	def   int
	usage string
}

// ints are the limits' flags, in the order --help lists them.
func (l *limitFlags) ints() []intFlag {
	return []intFlag{
		{"max-connections", &l.maxConnections, server.DefaultMaxConns, "open client connections; one more is closed before the greeting (the client retries)"},
		{"max-inflight-per-conn", &l.maxInflightPerConn, server.DefaultMaxInflightPerConn, "waiting acquires open on one client connection (one more is answered overloaded), and as many other requests (past them the member stops reading that connection)"},
		{"max-pending", &l.maxPending, node.DefaultMaxPending, "calls open in the member (queued, proposed, waiting); one more is answered overloaded"},
		{"max-waiters", &l.maxWaiters, node.DefaultMaxWaiters, "waiting acquires over all keys; one more is answered overloaded"},
		{"max-waiters-per-key", &l.maxWaitersPerKey, node.DefaultMaxWaitersPerKey, "waiting acquires on one key; one more is answered overloaded"},
		{"max-keys", &l.maxKeys, node.DefaultMaxKeys, "keys held; an acquire of one more key is answered overloaded"},
	}
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	for _, f := range l.ints() {
		fs.IntVar(f.v, f.name, f.def, f.usage)
	}
	fs.BoolVar(&l.debug, "debug", false, "serve Go's /debug/pprof profiles on the --http port")
}

func (l *limitFlags) validate() error {
	for _, f := range l.ints() {
		if *f.v <= 0 {
			return usageErr("--%s must be > 0, got %d", f.name, *f.v)
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

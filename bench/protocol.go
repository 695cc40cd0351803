package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/apiclient"
	"github.com/raftlock/raftlock/internal/cliflag"
)

// lockCalls are the calls the bench's raftlock sessions measure: the
// binary client's (*client.Client), or a client of the API port's gRPC or
// HTTP/JSON (package apiclient), so one workload measures each protocol.
type lockCalls interface {
	AcquireWith(ctx context.Context, r client.AcquireRequest) (client.Grant, error)
	ReleaseTagged(ctx context.Context, key string, token, tag uint64) error
	Get(ctx context.Context, key string) (client.LockInfo, error)
	Close() error
}

// checkProtocol refuses a --protocol the bench cannot measure: an unknown
// one, or one of the API port against --endpoints (the bench knows its
// members' client addresses, not their API addresses).
func checkProtocol(protocol string, endpoints bool) error {
	if !slices.Contains(apiclient.Protocols(), protocol) {
		return cliflag.Usagef("unknown --protocol %q (want %s)", protocol, strings.Join(apiclient.Protocols(), ", "))
	}
	if endpoints && protocol != apiclient.ProtocolBinary {
		return cliflag.Usagef("--protocol %s measures the bench's own cluster, whose members serve --api; against --endpoints only binary", protocol)
	}
	return nil
}

// usesAPI says whether protocol ("" is binary) is one of the API port's.
func usesAPI(protocol string) bool { return protocol != "" && protocol != apiclient.ProtocolBinary }

// dialCalls is the sessions' client for protocol: bin itself for the
// binary protocol, else a client of the members' API addresses apis.
func dialCalls(protocol string, bin *client.Client, apis []string, tc *tls.Config) (lockCalls, error) {
	switch protocol {
	case apiclient.ProtocolHTTP:
		return apiclient.NewHTTP(apis, apiclient.Options{TLS: tc})
	case apiclient.ProtocolGRPC:
		return apiclient.NewGRPC(apis, apiclient.Options{TLS: tc})
	case "", apiclient.ProtocolBinary:
		return bin, nil
	}
	return nil, fmt.Errorf("unknown protocol %q", protocol)
}

// apiAddrs gives each member an API address when protocol is one of the
// API port's, and returns them in the members' order; nil for binary.
func apiAddrs(protocol string, members []*benchMember) ([]string, error) {
	if !usesAPI(protocol) {
		return nil, nil
	}
	ports, err := freePorts(len(members))
	if err != nil {
		return nil, err
	}
	apis := make([]string, len(members))
	for i, m := range members {
		m.api = fmt.Sprintf("127.0.0.1:%d", ports[i])
		apis[i] = m.api
	}
	return apis, nil
}

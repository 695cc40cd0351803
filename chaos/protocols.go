package chaos

import (
	"fmt"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/apiclient"
)

// protocols are the run's protocols: Config.Protocols, or the binary
// protocol alone.
func (c *Config) protocols() []string {
	if len(c.Protocols) == 0 {
		return []string{apiclient.ProtocolBinary}
	}
	return c.Protocols
}

// defaultProtocols says whether every client speaks the binary protocol,
// so the run's reports are as they were before --protocols.
func (c *Config) defaultProtocols() bool {
	p := c.protocols()
	return len(p) == 1 && p[0] == apiclient.ProtocolBinary
}

// validateProtocols checks --protocols: known names, and a client for
// each (else one would be named and never run).
func (c *Config) validateProtocols() error {
	for _, p := range c.Protocols {
		if !slices.Contains(apiclient.Protocols(), p) {
			return fmt.Errorf("unknown protocol %q in --protocols (want some of %s)", p, strings.Join(apiclient.Protocols(), ","))
		}
	}
	if c.PinMembers && !c.usesAPI() {
		return fmt.Errorf("--pin-members keeps the API's clients to one member each: add http or grpc to --protocols")
	}
	if n := len(c.protocols()); c.Clients < n {
		return fmt.Errorf("--clients %d is fewer than the %d --protocols: each protocol needs a client", c.Clients, n)
	}
	return nil
}

// usesAPI says whether a client speaks a protocol of the API port, which
// the members then serve (--api).
func (c *Config) usesAPI() bool {
	return slices.ContainsFunc(c.protocols(), func(p string) bool { return p != apiclient.ProtocolBinary })
}

// protocolNotes adds the protocols of a run that is not all binary to its
// header and summary.md lines.
func (c *Config) protocolNotes(header map[string]any, lines []string) []string {
	if c.defaultProtocols() {
		return lines
	}
	header["protocols"] = c.protocols()
	p := c.protocols()
	line := fmt.Sprintf("Protocols: %s; client i of the harness speaks the i-th modulo %d (binary on the client port, the others on each member's API port).",
		strings.Join(p, ", "), len(p))
	if len(p) == 1 {
		line = fmt.Sprintf("Protocols: %s; every client of the harness speaks it, on each member's API port.", p[0])
	}
	if c.PinMembers {
		header["pin_members"] = true
		line += " Each API client keeps to one member (client i to the i-th) and never asks to be redirected: a follower relays its calls to the leader."
	}
	if c.ClientProcs > 0 {
		line += " The client processes speak binary."
	}
	return append(lines, line)
}

// dialer is the workload's Dial for the run's protocols (nil: the binary
// client, Workload's default): client i speaks the i-th modulo their
// number, to the members' API addresses where it is not binary.
func (c *Config) dialer(sup *Supervisor) func(i int, endpoints []string) (LockClient, error) {
	if c.defaultProtocols() {
		return nil
	}
	protocols := c.protocols()
	return func(i int, endpoints []string) (LockClient, error) {
		api, opts := sup.apiAddrs(endpoints), apiclient.Options{}
		if c.PinMembers && len(api) > 0 {
			// Kept to one member, and never asking to be redirected: a
			// follower relays the client's calls, as for a stock client.
			api, opts.Relayed = []string{api[i%len(api)]}, true
		}
		switch protocols[i%len(protocols)] {
		case apiclient.ProtocolHTTP:
			return apiclient.NewHTTP(api, opts)
		case apiclient.ProtocolGRPC:
			return apiclient.NewGRPC(api, opts)
		}
		return client.New(endpoints, client.Options{})
	}
}

// apiAddrs are the API addresses of the members whose client addresses
// are clients, in their order.
func (s *Supervisor) apiAddrs(clients []string) []string {
	byClient := map[string]string{}
	for _, m := range s.nodes {
		byClient[m.client] = m.api
	}
	out := make([]string, 0, len(clients))
	for _, c := range clients {
		if a := byClient[c]; a != "" {
			out = append(out, a)
		}
	}
	return out
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/peer"
)

// memberPeers decides how a member starts: bootstrapping with --peers, or
// joining a running cluster with --join (it asks that cluster for its
// configuration). A data directory with a stored identity restarts from
// its own log whatever the flags say: only this member's peer address is
// taken from them. The identity, not any data, is what makes a directory
// a member's: a joiner's first start writes it last (node.New), so a
// joiner cut short before it (its store seeded, say) joins again, with the
// cluster's id, instead of restarting as a member of no cluster.
func memberPeers(m *memberFlags, log *slog.Logger) (map[uint64]string, *node.Join, error) {
	if m.join == "" {
		peers, err := embed.ParsePeers(m.peers)
		if err != nil {
			return nil, nil, usageErr("--peers: %v", err)
		}
		return peers, nil, nil
	}
	switch {
	case m.peers != "":
		return nil, nil, usageErr("--join and --peers exclude each other: --peers bootstraps a new cluster, --join enters a running one")
	case m.cfg.Node.ID == 0:
		return nil, nil, usageErr("--id is required")
	case m.cfg.Node.DataDir == "":
		return nil, nil, usageErr("--data is required")
	}
	eps, err := parseEndpoints(m.join)
	if err != nil {
		return nil, nil, usageErr("--join: %v", strings.TrimPrefix(err.Error(), "--endpoints: "))
	}
	isMember, err := peer.HasIdentity(m.cfg.Node.DataDir)
	if err != nil {
		return nil, nil, err
	}
	if isMember {
		if m.cfg.Node.PeerListen == "" {
			return nil, nil, usageErr("--peer-listen is required with --join")
		}
		log.Info("the data directory is a member's: --join is ignored and the member restarts from its log", "member", m.cfg.Node.ID, "data", m.cfg.Node.DataDir)
		return map[uint64]string{m.cfg.Node.ID: m.cfg.Node.PeerListen}, nil, nil
	}
	tf := tlsFlags{files: m.sec.files}
	tc, err := tf.config()
	if err != nil {
		return nil, nil, err
	}
	cl, err := client.New(eps, client.Options{TLS: tc})
	if err != nil {
		return nil, nil, withCode(exitUsage, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	plan, err := embed.PlanJoin(ctx, cl, m.cfg.Node.ID)
	if err != nil {
		return nil, nil, clientErr(fmt.Errorf("join through %s: %w", m.join, err))
	}
	if m.cfg.Node.PeerListen == "" {
		m.cfg.Node.PeerListen = plan.PeerAddr
	}
	log.Info("joining the cluster", "member", m.cfg.Node.ID, "as", plan.Role, "peer_addr", plan.PeerAddr, "members", plan.Members)
	return map[uint64]string{m.cfg.Node.ID: plan.PeerAddr}, plan.Join, nil
}

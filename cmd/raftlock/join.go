package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/peer"
	"github.com/raftlock/raftlock/node/server"
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
		peers, err := parsePeers(m.peers)
		if err != nil {
			return nil, nil, usageErr("--peers: %v", err)
		}
		return peers, nil, nil
	}
	switch {
	case m.peers != "":
		return nil, nil, usageErr("--join and --peers exclude each other: --peers bootstraps a new cluster, --join enters a running one")
	case m.id == 0:
		return nil, nil, usageErr("--id is required")
	case m.data == "":
		return nil, nil, usageErr("--data is required")
	}
	eps, err := parseEndpoints(m.join)
	if err != nil {
		return nil, nil, usageErr("--join: %v", strings.TrimPrefix(err.Error(), "--endpoints: "))
	}
	isMember, err := peer.HasIdentity(m.data)
	if err != nil {
		return nil, nil, err
	}
	if isMember {
		if m.peerListen == "" {
			return nil, nil, usageErr("--peer-listen is required with --join")
		}
		log.Info("the data directory is a member's: --join is ignored and the member restarts from its log", "member", m.id, "data", m.data)
		return map[uint64]string{m.id: m.peerListen}, nil, nil
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
	var list server.MemberList
	if err := cl.Admin(ctx, "member.list", nil, &list, true); err != nil {
		return nil, nil, clientErr(fmt.Errorf("ask %s for the configuration: %w", m.join, err))
	}
	j := &node.Join{Bootstrap: map[uint64]string{}, Members: map[uint64]string{}}
	var self *node.Member
	for i, mm := range list.Members {
		j.Members[mm.ID] = mm.PeerAddr
		if mm.ID == m.id {
			self = &list.Members[i]
		}
	}
	for _, b := range list.Bootstrap {
		j.Bootstrap[b.ID] = b.PeerAddr
	}
	if self == nil {
		return nil, nil, fmt.Errorf("member %d is not in the cluster's configuration: add it first with raftlock member add --id %d --peer-addr HOST:PORT --client-addr HOST:PORT", m.id, m.id)
	}
	if self.Role == "voter" {
		// A voter has its data directory, and this one has no identity:
		// started, it would be refused by its peers (another incarnation)
		// and stay a pre-candidate forever.
		return nil, nil, fmt.Errorf("member %d is already a voter of the cluster, so it joined before: restart it on its own data directory, or replace it: raftlock member remove %d, then member add a new id and --join with that", m.id, m.id)
	}
	if len(j.Bootstrap) == 0 {
		return nil, nil, errors.New("the cluster did not say its bootstrap configuration (a member older than membership changes?)")
	}
	if list.ClusterID != "" {
		if j.ClusterID, err = peer.ParseClusterID(list.ClusterID); err != nil {
			return nil, nil, fmt.Errorf("the cluster's answer: %w", err)
		}
	}
	if m.peerListen == "" {
		m.peerListen = self.PeerAddr
	}
	log.Info("joining the cluster", "member", m.id, "as", self.Role, "peer_addr", self.PeerAddr, "members", len(list.Members))
	return map[uint64]string{m.id: self.PeerAddr}, j, nil
}

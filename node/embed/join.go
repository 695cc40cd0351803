package embed

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/peer"
)

// JoinPlan is what a new member learns from a running cluster before its
// first start with --join.
type JoinPlan struct {
	Join     *node.Join // for node.Config.Join
	PeerAddr string     // this member's peer address, as member add gave it
	Role     string     // what member add made it: "learner", say
	Members  int        // members in the cluster's configuration
}

// PlanJoin asks a running cluster, through cl, for its configuration, and
// checks that member id may join it: added (raftlock member add) and not a
// voter already (a voter joined before and has its data directory).
func PlanJoin(ctx context.Context, cl *client.Client, id uint64) (*JoinPlan, error) {
	var list wire.MemberList
	if err := cl.Admin(ctx, wire.AdminMemberList, nil, &list, true); err != nil {
		return nil, fmt.Errorf("ask for the configuration: %w", err)
	}
	j := &node.Join{Bootstrap: map[uint64]string{}, Members: map[uint64]string{}}
	var self *node.Member
	for i, mm := range list.Members {
		j.Members[mm.ID] = mm.PeerAddr
		if mm.ID == id {
			self = &list.Members[i]
		}
	}
	for _, b := range list.Bootstrap {
		j.Bootstrap[b.ID] = b.PeerAddr
	}
	if self == nil {
		return nil, fmt.Errorf("member %d is not in the cluster's configuration: add it first with raftlock member add --id %d --peer-addr HOST:PORT --client-addr HOST:PORT", id, id)
	}
	if self.Role == "voter" {
		// A voter has its data directory, and this one has no identity:
		// started, it would be refused by its peers (another incarnation)
		// and stay a pre-candidate forever.
		return nil, fmt.Errorf("member %d is already a voter of the cluster, so it joined before: restart it on its own data directory, or replace it: raftlock member remove %d, then member add a new id and --join with that", id, id)
	}
	if len(j.Bootstrap) == 0 {
		return nil, errors.New("the cluster did not say its bootstrap configuration (a member older than membership changes?)")
	}
	if list.ClusterID != "" {
		var err error
		if j.ClusterID, err = peer.ParseClusterID(list.ClusterID); err != nil {
			return nil, fmt.Errorf("the cluster's answer: %w", err)
		}
	}
	return &JoinPlan{Join: j, PeerAddr: self.PeerAddr, Role: self.Role, Members: len(list.Members)}, nil
}

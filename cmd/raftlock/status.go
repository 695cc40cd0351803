package main

import (
	"context"
	"io"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/clusterstatus"
)

const statusSynopsis = `status [--cluster] [--json]

Asks every endpoint (with --cluster, every member of the configuration) for
its raft status. Exit status, as etcdctl endpoint health: 0 when every member
asked answered and one knows a leader; 1 when a member asked is unreachable
or none knows a leader; 6 when the cluster's ACL refuses this identity.`

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("status", statusSynopsis, true)
	wholeCluster := fs.Bool("cluster", false, "ask every member of the configuration (from the leader's member list; needs the admin right under an ACL), not only --endpoints")
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	eps := cl.Endpoints()
	var list *wire.MemberList
	if *wholeCluster {
		list = new(wire.MemberList)
		if err := adminCall(cf, stdout, wire.AdminMemberList, nil, list, true); err != nil {
			return err
		}
		eps = eps[:0]
		for _, m := range list.Members {
			eps = append(eps, m.ClientAddr)
		}
	}
	r := clusterstatus.Gather(context.Background(), cl, eps, list, min(cf.timeout, 2*time.Second))
	if err := r.Write(stdout, cf.json); err != nil {
		return err
	}
	refused, err := r.Verdict()
	switch {
	case err == nil:
		return nil
	case refused:
		return withCode(exitPermission, err)
	}
	return withCode(exitError, err)
}

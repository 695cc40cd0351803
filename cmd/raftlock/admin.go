package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/raftlock/raftlock/client/wire"
)

// runMember lists and changes the cluster's members (member list, add,
// promote, remove), through the leader.
func runMember(args []string, stdout, stderr io.Writer) error {
	const synopsis = "member list|add|promote|remove [flags]"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs := newFlagSet("member", synopsis)
		fs.SetOutput(stderr)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fs.Usage()
			fmt.Fprintln(stderr, "\nsubcommands:\n  list                                             the members, their addresses and roles\n  add --id N --peer-addr HOST:PORT --client-addr HOST:PORT   add a member as a learner\n  promote N                                        make a caught-up learner a voter\n  remove N                                         remove a member (the leader hands over first)")
			return nil
		}
		return usageErr("want a subcommand: list, add, promote or remove")
	}
	switch sub, args := args[0], args[1:]; sub {
	case "list":
		return runMemberList(args, stdout, stderr)
	case "add":
		return runMemberAdd(args, stdout, stderr)
	case "promote", "remove":
		return runMemberChange(sub, args, stdout, stderr)
	}
	return usageErr("unknown member subcommand %q: want list, add, promote or remove", args[0])
}

// runMemberList is member list.
func runMemberList(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("member list", "member list [--json]", true)
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	var out wire.MemberList
	if err := adminCall(cf, stdout, wire.AdminMemberList, nil, &out, true); err != nil {
		return err
	}
	return printMembers(stdout, cf, out, "")
}

// runMemberAdd is member add: a new member, as a learner.
func runMemberAdd(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("member add", "member add --id N --peer-addr HOST:PORT --client-addr HOST:PORT [--json]", true)
	var a wire.MemberArgs
	fs.Uint64Var(&a.ID, "id", 0, "the new member's id (never one used before in this cluster)")
	fs.StringVar(&a.PeerAddr, "peer-addr", "", "the new member's raft address, which the others dial")
	fs.StringVar(&a.ClientAddr, "client-addr", "", "the new member's client address")
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	switch {
	case a.ID == 0:
		return usageErr("--id is required")
	case a.PeerAddr == "":
		return usageErr("--peer-addr is required")
	case a.ClientAddr == "":
		return usageErr("--client-addr is required")
	}
	// A change is safe to repeat: asked again after it applied (its
	// answer lost), it succeeds unchanged.
	var out wire.MemberList
	if err := adminCall(cf, stdout, wire.AdminMemberAdd, a, &out, true); err != nil {
		return err
	}
	msg := fmt.Sprintf("added member %d as a learner; start it on an empty data directory with:\n  raftlock node --id %d --join %s --peer-listen %s --listen %s [--http HOST:PORT] --data DIR\nthen promote it once it has caught up: raftlock member promote %d\n",
		a.ID, a.ID, cf.endpoints, a.PeerAddr, a.ClientAddr, a.ID)
	if out.Unchanged {
		msg = fmt.Sprintf("member %d is already in the configuration at %s (an earlier add applied); nothing changed\n", a.ID, a.PeerAddr)
	}
	return printMembers(stdout, cf, out, msg)
}

// runMemberChange is member promote and member remove.
func runMemberChange(sub string, args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("member "+sub, "member "+sub+" N [--json]", true)
	pos, rest, err := parse(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 || rest != nil {
		return usageErr("want exactly one member id")
	}
	id, err := strconv.ParseUint(pos[0], 10, 64)
	if err != nil || id == 0 {
		return usageErr("bad member id %q: want a number > 0", pos[0])
	}
	name := wire.AdminMemberPromote
	if sub == "remove" {
		name = wire.AdminMemberRemove
	}
	var out wire.MemberList
	if err := adminCall(cf, stdout, name, wire.MemberArgs{ID: id}, &out, true); err != nil {
		return err
	}
	var msg string
	switch {
	case sub == "promote" && out.Unchanged:
		msg = fmt.Sprintf("member %d is already a voter; nothing changed\n", id)
	case sub == "promote":
		msg = fmt.Sprintf("promoted member %d to voter\n", id)
	case out.Unchanged:
		msg = fmt.Sprintf("member %d was already removed (an earlier remove applied); nothing changed\n", id)
	default:
		msg = fmt.Sprintf("removed member %d; it stops itself once it learns so (stop its process if it is unreachable)\n", id)
	}
	return printMembers(stdout, cf, out, msg)
}

// runLeader moves leadership (leader transfer [--to N]).
func runLeader(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "transfer" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintln(stderr, "usage: raftlock leader transfer [--to N] [flags]\n\nhand leadership to member N (default: the most up-to-date other voter); see raftlock leader transfer --help")
			return nil
		}
		return usageErr("want: leader transfer [--to N]")
	}
	fs, cf := clientFlagSet("leader transfer", "leader transfer [--to N] [--json]", true)
	var a wire.TransferArgs
	fs.Uint64Var(&a.To, "to", 0, "the voter to hand leadership to (default: the most up-to-date other voter)")
	if err := parseNoArgs(fs, args[1:], stderr); err != nil {
		return err
	}
	var out wire.TransferResult
	if err := adminCall(cf, stdout, wire.AdminLeaderTransfer, a, &out, false); err != nil {
		return err
	}
	if cf.json {
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "leader is now member %d (%s)\n", out.Leader, out.LeaderAddr)
	return nil
}

// adminCall runs one admin command through the leader within --timeout;
// an idempotent one is asked again when its outcome is unknown
// (client.Client.Admin).
func adminCall(cf *clientFlags, stdout io.Writer, command string, in, out any, idempotent bool) error {
	cl, ctx, done, err := cf.connect(0)
	if err != nil {
		return err
	}
	defer done()
	if err := cl.Admin(ctx, command, in, out, idempotent); err != nil {
		return cf.failNoKey(stdout, err)
	}
	return nil
}

// printMembers prints msg and the member table, or with --json
// {"members":[{"id","peer_addr","client_addr","role"}]}, with
// "unchanged":true when the change had applied already.
func printMembers(stdout io.Writer, cf *clientFlags, out wire.MemberList, msg string) error {
	if cf.json {
		v := map[string]any{"members": out.Members}
		if out.Unchanged {
			v["unchanged"] = true // a change asked again after it applied
		}
		return printJSON(stdout, v)
	}
	fmt.Fprint(stdout, msg)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tPEER ADDR\tCLIENT ADDR")
	for _, m := range out.Members {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.ID, m.Role, orDash(m.PeerAddr), orDash(m.ClientAddr))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

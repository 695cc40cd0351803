package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/node/server"
)

const defaultEndpoints = "127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003"

// clientFlags are shared by every command that talks to a cluster.
type clientFlags struct {
	endpoints string
	json      bool
	timeout   time.Duration
	tls       tlsFlags // security.go
}

// register adds --endpoints and --timeout; queries add --json too.
func (c *clientFlags) register(fs *flag.FlagSet, query bool) {
	def := os.Getenv("RAFTLOCK_ENDPOINTS")
	if def == "" {
		def = defaultEndpoints
	}
	fs.StringVar(&c.endpoints, "endpoints", def, "comma-separated client addresses (env RAFTLOCK_ENDPOINTS)")
	if query {
		fs.BoolVar(&c.json, "json", false, "print JSON")
	}
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up after this long")
	c.tls.register(fs)
}

func (c *clientFlags) client() (*client.Client, error) { return c.clientAs("") }

// clientAs is client, recording owner with every lock it acquires.
func (c *clientFlags) clientAs(owner string) (*client.Client, error) {
	eps, err := parseEndpoints(c.endpoints)
	if err != nil {
		return nil, err
	}
	tc, err := c.tls.config()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(eps, client.Options{TLS: tc, Owner: owner})
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	return cl, nil
}

// parseEndpoints splits a comma-separated list of HOST:PORT addresses; a
// malformed one is a usage error before anything is dialled.
func parseEndpoints(s string) ([]string, error) {
	var eps []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		_, port, err := net.SplitHostPort(e)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n == 0 {
			return nil, usageErr("bad endpoint %q in --endpoints: want HOST:PORT", e)
		}
		eps = append(eps, e)
	}
	if len(eps) == 0 {
		return nil, usageErr("--endpoints is empty")
	}
	return eps, nil
}

// fail reports a failed call: with --json, also as {"key","error","message"}
// ({"error","message"} for an admin call)
// on stdout (error: held, not-found, outcome-unknown, invalid-argument or
// error), so a script reads the outcome from one place; the exit code is
// clientErr's either way.
func (c *clientFlags) fail(stdout io.Writer, key string, err error) error {
	if c.json {
		code := "error"
		var inv *client.InvalidArgumentError
		switch {
		case errors.Is(err, client.ErrHeld):
			code = "held"
		case errors.Is(err, client.ErrNotFound):
			code = "not-found"
		case errors.Is(err, client.ErrOutcomeUnknown):
			code = "outcome-unknown"
		case errors.As(err, &inv):
			code = "invalid-argument"
		case errors.Is(err, client.ErrPermissionDenied):
			code = "permission-denied"
		}
		out := map[string]any{"error": code, "message": strings.TrimPrefix(err.Error(), "raftlock: ")}
		if key != "" { // calls about a lock; admin calls have no key
			out["key"] = key
		}
		printJSON(stdout, out)
	}
	return clientErr(err)
}

// clientErr maps a client error to its exit code.
func clientErr(err error) error {
	switch {
	case errors.Is(err, client.ErrHeld):
		return withCode(exitHeld, err)
	case errors.Is(err, client.ErrNotFound):
		return withCode(exitNotOwner, err)
	case errors.Is(err, client.ErrOutcomeUnknown):
		return withCode(exitUnknown, err)
	case errors.Is(err, client.ErrPermissionDenied):
		return withCode(exitPermission, err)
	}
	return withCode(exitError, err)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

// oneKey parses a command that takes exactly one KEY argument.
func oneKey(fs *flag.FlagSet, args []string, stderr io.Writer) (string, error) {
	pos, rest, err := parse(fs, args, stderr)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 || rest != nil {
		return "", argErr(fs, "want exactly one KEY")
	}
	return pos[0], nil
}

func runAcquire(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("acquire", "acquire KEY [--lease 10s] [--wait 0s] [--owner TEXT] [--json]")
	var cf clientFlags
	cf.register(fs, true)
	lease := fs.Duration("lease", 10*time.Second, "lease length (10ms..1h)")
	wait := fs.Duration("wait", 0, "queue for the lock this long (0: fail at once when held)")
	owner := ownerFlag(fs)
	fs.Lookup("timeout").Usage += " (after --wait)"
	key, err := oneKey(fs, args, stderr)
	if err != nil {
		return err
	}
	if err := checkOwner(*owner); err != nil {
		return err
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *wait+cf.timeout)
	defer cancel()
	g, err := cl.AcquireWith(ctx, client.AcquireRequest{Key: key, Lease: *lease, Wait: *wait, Owner: *owner})
	if err != nil {
		return cf.fail(stdout, key, err)
	}
	if cf.json {
		return printJSON(stdout, map[string]any{"key": key, "token": g.Token, "lease_ms": g.LeaseMS, "owner": *owner})
	}
	fmt.Fprintf(stdout, "acquired %s: token %d, lease %v\n", key, g.Token, time.Duration(g.LeaseMS)*time.Millisecond)
	return nil
}

func runRelease(args []string, stdout, stderr io.Writer) error {
	return runHolderCommand("release", args, stdout, stderr)
}

func runRenew(args []string, stdout, stderr io.Writer) error {
	return runHolderCommand("renew", args, stdout, stderr)
}

// runHolderCommand is release and renew: calls made by the holder, with
// its token, answered "not the holder" (exit 4) otherwise.
func runHolderCommand(name string, args []string, stdout, stderr io.Writer) error {
	synopsis := "release KEY --token N [--json]\n       raftlock release KEY --force [--json]   (an operator's: needs the admin right)"
	if name == "renew" {
		synopsis = "renew KEY --token N [--lease 10s] [--json]"
	}
	fs := newFlagSet(name, synopsis)
	var cf clientFlags
	cf.register(fs, true)
	token := fs.Uint64("token", 0, "the holder's fencing token (required)")
	var lease *time.Duration
	force := new(bool)
	if name == "renew" {
		lease = fs.Duration("lease", 10*time.Second, "new lease length from now (10ms..1h)")
	} else {
		fs.BoolVar(force, "force", false, "free the lock whatever its token (an operator's; needs the ACL's admin right, exit 6 without it)")
	}
	key, err := oneKey(fs, args, stderr)
	if err != nil {
		return err
	}
	if *force {
		if *token != 0 {
			return usageErr("--force releases whatever token holds the key: give --token or --force, not both")
		}
		return forceRelease(cf, key, stdout)
	}
	if *token == 0 {
		return usageErr("--token is required")
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cf.timeout)
	defer cancel()
	if name == "renew" {
		err = cl.Renew(ctx, key, *token, *lease)
	} else {
		err = cl.Release(ctx, key, *token)
	}
	if err != nil {
		return cf.fail(stdout, key, err)
	}
	switch {
	case cf.json && name == "renew":
		return printJSON(stdout, map[string]any{"key": key, "token": *token, "lease_ms": lease.Milliseconds()})
	case cf.json:
		return printJSON(stdout, map[string]any{"key": key, "token": *token, "released": true})
	case name == "renew":
		fmt.Fprintf(stdout, "renewed %s (token %d) for %v\n", key, *token, *lease)
	default:
		fmt.Fprintf(stdout, "released %s (token %d)\n", key, *token)
	}
	return nil
}

func runGet(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("get", "get KEY [--stale] [--json]")
	var cf clientFlags
	cf.register(fs, true)
	stale := fs.Bool("stale", false, "read any member's local state (fast, possibly stale)")
	key, err := oneKey(fs, args, stderr)
	if err != nil {
		return err
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cf.timeout)
	defer cancel()
	var info client.LockInfo
	if *stale {
		info, err = cl.GetStale(ctx, key)
	} else {
		info, err = cl.Get(ctx, key)
	}
	if err != nil {
		return cf.fail(stdout, key, err)
	}
	if cf.json {
		out := map[string]any{"key": key, "held": info.Held, "token": info.Token, "remaining_ms": info.RemainingMS}
		if info.Held {
			out["owner"] = info.Owner
		}
		return printJSON(stdout, out)
	}
	if !info.Held {
		fmt.Fprintf(stdout, "%s is free\n", key)
		return nil
	}
	fmt.Fprintf(stdout, "%s is held by %s: token %d, %v of lease left\n", key, ownerText(info.Owner), info.Token, time.Duration(info.RemainingMS)*time.Millisecond)
	return nil
}

type statusEntry struct {
	ID      uint64  `json:"id,omitempty"`
	Addr    string  `json:"addr"`
	Role    string  `json:"role"`
	Term    *uint64 `json:"term,omitempty"`
	Leader  *uint64 `json:"leader,omitempty"`
	Commit  *uint64 `json:"commit,omitempty"`
	Applied *uint64 `json:"applied,omitempty"`
	// Digest of the lock table at Applied: equal on every member at one
	// applied index.
	Digest string `json:"digest,omitempty"`
	Error  string `json:"error,omitempty"`

	voters, learners []uint64 // the configuration this member applied
}

// configuration is the configuration the most advanced reachable member
// has applied (the leader's, when it is reachable).
func configuration(entries []statusEntry) (voters, learners []uint64, ok bool) {
	var best *statusEntry
	for i := range entries {
		e := &entries[i]
		if e.Applied == nil || len(e.voters) == 0 {
			continue
		}
		if best == nil || e.Role == "leader" || (best.Role != "leader" && *e.Applied > *best.Applied) {
			best = e
		}
	}
	if best == nil {
		return nil, nil, false
	}
	return best.voters, best.learners, true
}

func joinIDs(ids []uint64) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, " ")
}

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", "status [--cluster] [--json]")
	var cf clientFlags
	cf.register(fs, true)
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
	if *wholeCluster {
		var list server.MemberList
		if err := adminCall(&cf, stdout, "member.list", nil, &list, true); err != nil {
			return err
		}
		eps = eps[:0]
		for _, m := range list.Members {
			eps = append(eps, m.ClientAddr)
		}
	}
	entries := make([]statusEntry, len(eps))
	done := make(chan struct{}, len(eps))
	for i, ep := range eps {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(context.Background(), min(cf.timeout, 2*time.Second))
			defer cancel()
			st, err := cl.Status(ctx, ep)
			if err != nil {
				entries[i] = statusEntry{Addr: ep, Role: "unreachable", Error: err.Error()}
				return
			}
			role := st.Role
			if slices.Contains(st.Learners, st.ID) {
				role = "learner"
			}
			entries[i] = statusEntry{ID: st.ID, Addr: ep, Role: role, Term: &st.Term, Leader: &st.Leader, Commit: &st.Commit, Applied: &st.Applied, Digest: st.Digest,
				voters: st.Voters, learners: st.Learners}
		}()
	}
	for range eps {
		<-done
	}
	reachable, denied := 0, 0
	for _, e := range entries {
		if e.Role != "unreachable" {
			reachable++
		}
		if strings.Contains(e.Error, client.ErrPermissionDenied.Error()) {
			denied++
		}
	}
	voters, learners, known := configuration(entries)
	if cf.json {
		out := map[string]any{"nodes": entries}
		if known {
			out["configuration"] = map[string][]uint64{"voters": voters, "learners": append([]uint64{}, learners...)}
			if missing := notShown(entries, voters, learners); len(missing) > 0 {
				out["not_asked"] = missing
			}
		}
		if err := printJSON(stdout, out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tADDR\tROLE\tTERM\tLEADER\tCOMMIT\tAPPLIED\tDIGEST")
		for _, e := range entries {
			if e.Term == nil {
				fmt.Fprintf(tw, "-\t%s\t%s\t-\t-\t-\t-\t-\n", e.Addr, e.Role)
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", e.ID, e.Addr, e.Role, *e.Term, *e.Leader, *e.Commit, *e.Applied, e.Digest)
		}
		tw.Flush()
		if known {
			fmt.Fprintf(stdout, "configuration: voters %s; learners %s\n", joinIDs(voters), joinIDs(learners))
			if missing := notShown(entries, voters, learners); len(missing) > 0 {
				noun := "member"
				if len(missing) > 1 {
					noun = "members"
				}
				fmt.Fprintf(stdout, "not asked: %s %s (status --cluster asks every member)\n", noun, joinIDs(missing))
			}
		}
	}
	if denied == len(entries) {
		return withCode(exitPermission, errors.New(strings.TrimPrefix(entries[0].Error, "raftlock: ")))
	}
	if reachable == 0 {
		// Say why, as the other commands do: "the member requires TLS"
		// helps where "unreachable" alone sends the user to the network.
		return withCode(exitError, fmt.Errorf("no member reachable: %s: %s", entries[0].Addr, strings.TrimPrefix(entries[0].Error, "raftlock: ")))
	}
	return nil
}

// notShown returns the members of the configuration no entry is about.
func notShown(entries []statusEntry, voters, learners []uint64) []uint64 {
	var missing []uint64
	for _, id := range append(slices.Clone(voters), learners...) {
		if !slices.ContainsFunc(entries, func(e statusEntry) bool { return e.ID == id }) {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	return missing
}

// extraCommands are the harness commands (chaos, check, bench).
func extraCommands() []command {
	return []command{
		{"chaos", "run a cluster under faults, record a history and check it", runChaos},
		{"check", "check a recorded history (linearizability, fencing, leases, resource)", runCheck},
		{"bench", "measure throughput and latency, against the physical floor and peers", runBench},
		{"sim", "simulate a cluster deterministically under faults, one seed or a swarm, and check it", runSim},
	}
}

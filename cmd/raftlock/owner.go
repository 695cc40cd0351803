package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/wire"
)

// ownerFlag adds --owner: who takes the lock, kept with it for get and
// list to show. Its default, this process's HOSTNAME:PID, is filled in
// after parsing, so that --help shows the rule rather than its own PID.
func ownerFlag(fs *flag.FlagSet) *string {
	v := &ownerValue{}
	fs.Var(v, "owner", "`TEXT` naming who holds the lock, shown by get and list (at most 128 bytes; \"\" records none)")
	return &v.owner
}

// ownerValue is --owner: HOSTNAME:PID until set.
type ownerValue struct {
	owner string
	set   bool
}

func (v *ownerValue) String() string {
	if v == nil || !v.set {
		return "HOSTNAME:PID"
	}
	return v.owner
}

func (v *ownerValue) Set(s string) error {
	v.owner, v.set = s, true
	return nil
}

// checkOwner refuses an --owner over the limit before anything is sent,
// and fills in the default of one not given.
func checkOwner(owner *string, fs *flag.FlagSet) error {
	if v, ok := fs.Lookup("owner").Value.(*ownerValue); ok && !v.set {
		*owner = client.DefaultOwner()
	}
	return checkOwnerLen(*owner)
}

func checkOwnerLen(owner string) error {
	if err := wire.ValidateOwner(owner); err != nil {
		return usageErr("--owner: %v", err)
	}
	return nil
}

// forceRelease is release --force: an operator frees a lock whatever its
// token. It prints the token that held the key.
func forceRelease(cf *clientFlags, key string, stdout io.Writer) error {
	cl, ctx, done, err := cf.connect(0)
	if err != nil {
		return err
	}
	defer done()
	tok, err := cl.ForceRelease(ctx, key)
	if errors.Is(err, client.ErrNotFound) {
		err = notHeldError{key}
	}
	if err != nil {
		return cf.fail(stdout, key, err)
	}
	if cf.json {
		return printJSON(stdout, map[string]any{"key": key, "token": tok, "released": true, "forced": true})
	}
	fmt.Fprintf(stdout, "released %s (token %d), forced\n", key, tok)
	return nil
}

// notHeldError is a forced release of a key nobody holds: "not the
// holder" (exit 4), said as what it means here.
type notHeldError struct{ key string }

func (e notHeldError) Error() string { return e.key + " is not held" }
func (e notHeldError) Unwrap() error { return client.ErrNotFound }

func runList(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("list", "list [PREFIX] [--limit 100] [--after LAST] [--stale] [--json]\n\nPREFIX (default: every key) and LAST, the last key of the page before, are at most 256 bytes.", true)
	limit := fs.Int("limit", 100, "at most this many locks (1..1000; a page may hold fewer when keys are long)")
	after := fs.String("after", "", "list from the first key after this one: the last key of the previous page")
	stale := fs.Bool("stale", false, "read any member's local state (fast, possibly stale)")
	pos, rest, err := parse(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 1 || rest != nil {
		return argErr(fs, "want at most one PREFIX")
	}
	if *limit < 1 || *limit > 1000 {
		return usageErr("--limit must be 1..1000, got %d", *limit)
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	cl, ctx, done, err := cf.connect(0)
	if err != nil {
		return err
	}
	defer done()
	page, err := cl.List(ctx, client.ListOptions{Prefix: prefix, After: *after, Limit: *limit, Stale: *stale})
	if err != nil {
		return cf.failNoKey(stdout, err)
	}
	if cf.json {
		if page.Locks == nil {
			page.Locks = []client.HeldLock{} // an empty page is [], not null
		}
		return printJSON(stdout, page)
	}
	if len(page.Locks) == 0 {
		from := ""
		if *after != "" {
			from = fmt.Sprintf(" after %q", *after)
		}
		fmt.Fprintf(stdout, "no locks held%s%s\n", underPrefix(prefix), from)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOKEN\tOWNER\tREMAINING")
	for _, l := range page.Locks {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%v\n", l.Key, l.Token, orDash(l.Owner), (time.Duration(l.RemainingMS) * time.Millisecond).Round(time.Millisecond))
	}
	tw.Flush()
	if page.More {
		args := []string{"raftlock list"}
		if prefix != "" {
			args = append(args, shellQuote(prefix))
		}
		args = append(args, "--after", shellQuote(page.Locks[len(page.Locks)-1].Key))
		if *limit != 100 {
			args = append(args, fmt.Sprintf("--limit %d", *limit))
		}
		if *stale {
			args = append(args, "--stale")
		}
		fmt.Fprintf(stdout, "more: %s\n", strings.Join(args, " "))
	}
	return nil
}

func underPrefix(prefix string) string {
	if prefix == "" {
		return ""
	}
	return fmt.Sprintf(" under %q", prefix)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '-' || r == '_' || r == '.' || r == ':' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

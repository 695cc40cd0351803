package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/raftlock/raftlock/internal/atomicfile"
	"github.com/raftlock/raftlock/internal/cliflag"
	membercore "github.com/raftlock/raftlock/member"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/server"
)

const snapshotWant = "want: raftlock snapshot save FILE, or raftlock snapshot restore FILE --data DIR --id N --peers 1=HOST:PORT,..."

// runSnapshot is `raftlock snapshot save|restore`: a backup of the lock
// table taken from the leader, and a new member's data directory seeded
// from one. The file format is membercore.EncodeBackup's.
func runSnapshot(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("%s", snapshotWant)
	}
	switch args[0] {
	case "save":
		return runSnapshotSave(args[1:], stdout, stderr)
	case "restore":
		return runSnapshotRestore(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		// Both subcommands' flags: the completion script reads them here.
		for _, sub := range []func([]string, io.Writer, io.Writer) error{runSnapshotSave, runSnapshotRestore} {
			sub([]string{"--help"}, stdout, stderr)
			fmt.Fprintln(stderr)
		}
		return flag.ErrHelp
	}
	return usageErr("unknown subcommand %q; %s", args[0], snapshotWant)
}

func runSnapshotSave(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("snapshot save", "snapshot save FILE [--json]\n\n"+
		"Saves the lock table, read by the leader at one applied index, to FILE (written\n"+
		"atomically) with its SHA-256; `raftlock snapshot restore` seeds a new cluster from it.", true)
	file, err := oneArg(fs, args, stderr, "FILE")
	if err != nil {
		return err
	}
	// Before asking the cluster: a backup with nowhere to go is wasted work.
	if fi, err := os.Stat(filepath.Dir(file)); err != nil || !fi.IsDir() {
		return cf.failNoKey(stdout, fmt.Errorf("cannot write %s: %s is not a directory", file, filepath.Dir(file)))
	}
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		return cf.failNoKey(stdout, fmt.Errorf("%s is a directory; give a file name, such as %s", file, filepath.Join(file, "raftlock.backup")))
	}
	cl, ctx, done, err := cf.connect(0)
	if err != nil {
		return err
	}
	defer done()
	meta, table, err := server.FetchBackup(ctx, cl)
	if err != nil {
		return cf.failNoKey(stdout, err)
	}
	if err := atomicfile.Write(file, membercore.EncodeBackup(meta, table), 0o600); err != nil {
		return cf.failNoKey(stdout, err)
	}
	if cf.json {
		return printJSON(stdout, map[string]any{"file": file, "index": meta.Index, "term": meta.Term, "locks": meta.Locks,
			"last_token": meta.LastToken, "size": meta.Size, "sha256": meta.SHA256, "created": meta.Created})
	}
	fmt.Fprintf(stdout, "saved snapshot at index %d term %d: %s, last token %d, %s, sha256 %s -> %s\n",
		meta.Index, meta.Term, cliflag.Plural(int(meta.Locks), "lock", "locks"), meta.LastToken, cliflag.Plural(int(meta.Size), "byte", "bytes"), meta.SHA256, file)
	return nil
}

func runSnapshotRestore(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("snapshot restore", "snapshot restore FILE --data DIR --id N --peers 1=HOST:PORT,... [--json]\n\n"+
		"Seeds a new member's data directory from a backup taken by `raftlock snapshot save`:\n"+
		"run it once per member of the new cluster, with the same FILE and --peers, then\n"+
		"start each member. Every lock held in the backup is held again with its token and\n"+
		"a full lease. The next token is above every token in the backup by --bump-tokens,\n"+
		"so no token the old cluster granted after the backup is ever granted again (a\n"+
		"fenced resource that saw it would accept two holders): set it above the number of\n"+
		"grants the old cluster can have made since the backup.")
	var r embed.RestoreFlags
	r.RegisterFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	file, err := oneArg(fs, args, stderr, "FILE")
	if err != nil {
		return err
	}
	meta, start, err := r.Restore(file)
	if err != nil {
		return failLocal(*asJSON, stdout, err)
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"file": file, "data": r.Dir, "id": r.ID, "peers": embed.FormatPeers(r.Peers),
			"index": meta.Index, "term": meta.Term, "locks": meta.Locks, "last_token": meta.LastToken,
			"next_token": meta.LastToken + r.Bump + 1, "sha256": meta.SHA256, "start": start})
	}
	fmt.Fprintf(stdout, "restored snapshot at index %d term %d (%s, last token %d, next token %d, sha256 %s) into %s as member %d of %d\n",
		meta.Index, meta.Term, cliflag.Plural(int(meta.Locks), "lock", "locks"), meta.LastToken, meta.LastToken+r.Bump+1, meta.SHA256, r.Dir, r.ID, len(r.Peers))
	fmt.Fprintf(stdout, "start it with its usual --listen, --http and TLS flags: %s\n", start)
	return nil
}

package main

import (
	"fmt"
	"io"

	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/tlsconfig"
)

// runCerts is `raftlock certs init`: a CA and the certificates of members
// and clients (tlsconfig.Init).
func runCerts(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
		args = []string{"init", "--help"} // init is the only subcommand
	}
	if len(args) == 0 || args[0] != "init" {
		return usageErr("want: raftlock certs init --out DIR --members N (see raftlock certs --help)")
	}
	fs := newFlagSet("certs init", "certs init --out DIR --members N [--hosts LIST] [--clients NAMES] [--force] [--json]\n\n"+
		"Writes a CA (ca.pem, ca-key.pem), one certificate per member (member-N.pem, member-N-key.pem,\n"+
		"bound to member id N, valid for localhost, 127.0.0.1 and --hosts) and one per client\n"+
		"(client-NAME.pem, client-NAME-key.pem; the identity is NAME). Keys are mode 0600.\n"+
		"Keep ca-key.pem off the members: it signs new certificates.")
	out := fs.String("out", "", "directory to write into (required)")
	members := fs.Int("members", 0, "number of members, ids 1..N (required)")
	hosts := fs.String("hosts", "", "comma-separated host names or IPs the members serve on, besides localhost and 127.0.0.1")
	clients := fs.String("clients", "admin", "comma-separated client names (identities)")
	force := fs.Bool("force", false, "overwrite existing files")
	asJSON := fs.Bool("json", false, "print the files written as JSON")
	if err := parseNoArgs(fs, args[1:], stderr); err != nil {
		return err
	}
	switch {
	case *out == "":
		return argErr(fs, "--out is required: the directory to write into")
	case !cliflag.Given(fs, "members"):
		return argErr(fs, "--members is required: the number of members")
	case *members < 1 || *members > tlsconfig.MaxMembers:
		return argErr(fs, "--members %d: want 1..%d", *members, tlsconfig.MaxMembers)
	}
	for _, c := range cliflag.SplitList(*clients) {
		if tlsconfig.LooksLikeMember(c) {
			// A client so named would pass for a member wherever a name is
			// compared (tlsconfig.Identity); the servers refuse its
			// certificate, so issuing it helps nobody.
			return argErr(fs, "--clients %s: client names may not look like member names (member-N)", c)
		}
	}
	files, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: *out, Members: *members, Hosts: cliflag.SplitList(*hosts), Clients: cliflag.SplitList(*clients), Force: *force})
	if err != nil {
		return failLocal(*asJSON, stdout, err)
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"files": files})
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return nil
}

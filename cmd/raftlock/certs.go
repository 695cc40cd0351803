package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/tlsconfig"
)

const certsWant = "want: raftlock certs init --out DIR --members N, raftlock certs add-client NAME --out DIR, or raftlock certs add-member ID --out DIR"

// runCerts is `raftlock certs`: init makes a CA and the certificates of
// members and clients (tlsconfig.Init); add-client and add-member sign one
// more with an existing CA, which a running cluster accepts at once.
func runCerts(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("%s", certsWant)
	}
	switch args[0] {
	case "init":
		return runCertsInit(args[1:], stdout, stderr)
	case "add-client":
		return runCertsAddClient(args[1:], stdout, stderr)
	case "add-member":
		return runCertsAddMember(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		// Every subcommand's flags: the completion script reads them here.
		for _, sub := range []func([]string, io.Writer, io.Writer) error{runCertsInit, runCertsAddClient, runCertsAddMember} {
			sub([]string{"--help"}, stdout, stderr)
			fmt.Fprintln(stderr)
		}
		return flag.ErrHelp
	}
	return usageErr("unknown subcommand %q; %s", args[0], certsWant)
}

func runCertsInit(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certs init", "certs init --out DIR --members N [--hosts LIST] [--clients NAMES] [--force] [--json]\n\n"+
		"Writes a CA (ca.pem, ca-key.pem), one certificate per member (member-N.pem, member-N-key.pem,\n"+
		"bound to member id N, valid for localhost, 127.0.0.1 and --hosts) and one per client\n"+
		"(client-NAME.pem, client-NAME-key.pem; the identity is NAME). Keys are mode 0600.\n"+
		"Keep ca-key.pem off the members: it signs new certificates (certs add-client, add-member).")
	out := fs.String("out", "", "directory to write into (required)")
	members := fs.Int("members", 0, "number of members, ids 1..N (required)")
	hosts := fs.String("hosts", "", "comma-separated host names or IPs the members serve on, besides localhost and 127.0.0.1")
	clients := fs.String("clients", "admin", "comma-separated client names (identities)")
	force := fs.Bool("force", false, "overwrite existing files")
	asJSON := fs.Bool("json", false, "print the files written as JSON")
	if err := parseNoArgs(fs, args, stderr); err != nil {
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
	return printFiles(*asJSON, stdout, files, err)
}

func runCertsAddClient(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certs add-client", "certs add-client NAME --out DIR [--force] [--json]\n\n"+
		"Signs a client certificate whose identity is NAME with the CA in DIR (ca.pem, ca-key.pem,\n"+
		"as certs init wrote them) and writes client-NAME.pem and client-NAME-key.pem (mode 0600)\n"+
		"there. A running cluster accepts it at once: members trust the CA, not a list of\n"+
		"certificates. What NAME may do is the ACL's (--acl).")
	out := fs.String("out", "", "directory holding the CA, where the new files are written (required)")
	force := fs.Bool("force", false, "overwrite the client's certificate and key if they exist")
	asJSON := fs.Bool("json", false, "print the files written as JSON")
	name, err := oneArg(fs, args, stderr, "NAME")
	if err != nil {
		return err
	}
	switch {
	case *out == "":
		return argErr(fs, "--out is required: the directory holding ca.pem and ca-key.pem")
	case tlsconfig.LooksLikeMember(name):
		return argErr(fs, "client %s: client names may not look like member names (member-N)", name)
	}
	files, err := tlsconfig.AddClient(tlsconfig.AddOptions{Dir: *out, Force: *force}, name)
	return printFiles(*asJSON, stdout, files, err)
}

func runCertsAddMember(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certs add-member", "certs add-member ID --out DIR [--hosts LIST] [--force] [--json]\n\n"+
		"Signs the certificate of member ID with the CA in DIR and writes member-ID.pem and\n"+
		"member-ID-key.pem there, for a member added with `raftlock member add`.")
	out := fs.String("out", "", "directory holding the CA, where the new files are written (required)")
	hosts := fs.String("hosts", "", "comma-separated host names or IPs the member serves on, besides localhost and 127.0.0.1")
	force := fs.Bool("force", false, "overwrite the member's certificate and key if they exist")
	asJSON := fs.Bool("json", false, "print the files written as JSON")
	arg, err := oneArg(fs, args, stderr, "ID")
	if err != nil {
		return err
	}
	id, perr := strconv.ParseUint(arg, 10, 64)
	switch {
	case perr != nil || id < 1 || id > tlsconfig.MaxMembers:
		return argErr(fs, "member id %q: want 1..%d", arg, tlsconfig.MaxMembers)
	case *out == "":
		return argErr(fs, "--out is required: the directory holding ca.pem and ca-key.pem")
	}
	files, err := tlsconfig.AddMember(tlsconfig.AddOptions{Dir: *out, Hosts: cliflag.SplitList(*hosts), Force: *force}, id)
	return printFiles(*asJSON, stdout, files, err)
}

// printFiles prints the files a certs subcommand wrote, one a line or as
// {"files":[...]}, or fails with err.
func printFiles(asJSON bool, stdout io.Writer, files []string, err error) error {
	if err != nil {
		return failLocal(asJSON, stdout, err)
	}
	if asJSON {
		return printJSON(stdout, map[string]any{"files": files})
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return nil
}

package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/node/embed"
)

// exitPermission: the cluster's ACL refused the call.
const exitPermission = 6

// securityFlags are a member's certificates, ACL and --insecure.
type securityFlags struct {
	files     tlsconfig.Files
	acl       string
	insecure  bool
	clusterID string
}

func (s *securityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.files.Cert, "cert", "", "this member's certificate (PEM), bound to its id (see raftlock certs init); re-read on SIGHUP")
	fs.StringVar(&s.files.Key, "key", "", "the certificate's private key (PEM); re-read on SIGHUP")
	fs.StringVar(&s.files.CA, "ca", "", "the CA (PEM) every member's and client's certificate must chain to; re-read on SIGHUP")
	fs.StringVar(&s.acl, "acl", "", "ACL file (JSON) of client identities, key prefixes and rights; re-read on SIGHUP (empty: every client with a certificate may do everything)")
	fs.StringVar(&s.clusterID, "cluster-id", "", "the cluster's id, 16 hex digits, the same on every member (default: the one stored in --data, else derived from --peers at the first boot); peers of another cluster are refused")
	fs.BoolVar(&s.insecure, "insecure", false, "allow non-loopback addresses without certificates: no authentication, no encryption")
}

// reloadOnHUP reloads certificates and ACL on every SIGHUP until ctx ends.
func reloadOnHUP(ctx context.Context, mbs []*embed.Member) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				for _, mb := range mbs {
					mb.Reload()
				}
			}
		}
	}()
}

// tlsFlags are a client's certificate, key and CA.
type tlsFlags struct{ files tlsconfig.Files }

func (t *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.files.Cert, "cert", "", "client certificate (PEM) for a cluster that requires TLS; its common name is your identity")
	fs.StringVar(&t.files.Key, "key", "", "the client certificate's private key (PEM)")
	fs.StringVar(&t.files.CA, "ca", "", "the cluster's CA (PEM)")
}

// config is the client's TLS configuration, nil without certificates.
func (t *tlsFlags) config() (*tls.Config, error) {
	if !t.files.Set() {
		return nil, nil
	}
	// Only some of the three given is a usage error; files that cannot be
	// read or do not hold certificates are a TLS failure, exit 1.
	if err := t.files.Check(); err != nil {
		return nil, usageErr("%v", err)
	}
	r, err := tlsconfig.Load(t.files)
	if err != nil {
		return nil, withCode(exitError, err)
	}
	return r.ClientConfig(), nil
}

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
	case !flagGiven(fs, "members"):
		return argErr(fs, "--members is required: the number of members")
	case *members < 1 || *members > tlsconfig.MaxMembers:
		return argErr(fs, "--members %d: want 1..%d", *members, tlsconfig.MaxMembers)
	}
	split := func(s string) []string {
		var l []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				l = append(l, p)
			}
		}
		return l
	}
	files, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: *out, Members: *members, Hosts: split(*hosts), Clients: split(*clients), Force: *force})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"files": files})
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return nil
}

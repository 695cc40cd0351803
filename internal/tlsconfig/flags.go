package tlsconfig

import (
	"crypto/tls"
	"flag"

	"github.com/raftlock/raftlock/internal/cliflag"
)

// RegisterClientFlags adds a client's --cert, --key and --ca.
func (f *Files) RegisterClientFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.Cert, "cert", "", "client certificate (PEM) for a cluster that requires TLS; its common name is your identity")
	fs.StringVar(&f.Key, "key", "", "the client certificate's private key (PEM)")
	fs.StringVar(&f.CA, "ca", "", "the cluster's CA (PEM)")
}

// RegisterMemberFlags adds a member's --cert, --key and --ca.
func (f *Files) RegisterMemberFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.Cert, "cert", "", "this member's certificate (PEM), bound to its id (see raftlock certs init); re-read on SIGHUP")
	fs.StringVar(&f.Key, "key", "", "the certificate's private key (PEM); re-read on SIGHUP")
	fs.StringVar(&f.CA, "ca", "", "the CA (PEM) every member's and client's certificate must chain to; re-read on SIGHUP")
}

// ClientConfig is a client's TLS configuration from the files, nil
// without them. Only some of the three given is a usage error (exit 2);
// files that cannot be read or hold no certificates are a TLS failure
// (exit 1).
func (f Files) ClientConfig() (*tls.Config, error) {
	if !f.Set() {
		return nil, nil
	}
	if err := f.Check(); err != nil {
		return nil, cliflag.Usagef("%v", err)
	}
	r, err := Load(f)
	if err != nil {
		return nil, cliflag.WithCode(cliflag.ExitError, err)
	}
	return r.ClientConfig(), nil
}

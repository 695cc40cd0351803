package chaos

import (
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/apiclient"
)

// Client i speaks the i-th protocol modulo their number, to the members'
// API addresses for the API's protocols; a run of the binary protocol
// alone dials as it always did and its reports say nothing of protocols.
func TestDialerSpreadsClientsOverProtocols(t *testing.T) {
	sup := &Supervisor{nodes: map[int]*memberProc{1: {client: "127.0.0.1:1", api: "127.0.0.1:2"}}}
	cfg := Defaults()
	if cfg.dialer(sup) != nil || cfg.usesAPI() {
		t.Fatal("a default run dials other than the binary client, or serves the API")
	}
	if h, lines := cfg.settingsNotes(); h != nil || lines != nil {
		t.Fatalf("a default run notes %v %q", h, lines)
	}
	cfg.Protocols = apiclient.Protocols()
	if err := cfg.Validate(); err != nil || !cfg.usesAPI() {
		t.Fatalf("validate %v: %v, uses the API %v", cfg.Protocols, err, cfg.usesAPI())
	}
	dial := cfg.dialer(sup)
	for i := range 2 * len(cfg.Protocols) {
		cl, err := dial(i, []string{"127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		switch cl.(type) {
		case *client.Client:
			got = apiclient.ProtocolBinary
		case *apiclient.HTTP:
			got = apiclient.ProtocolHTTP
		case *apiclient.GRPC:
			got = apiclient.ProtocolGRPC
		}
		if want := cfg.Protocols[i%len(cfg.Protocols)]; got != want {
			t.Errorf("client %d speaks %q (%T), want %q", i, got, cl, want)
		}
		cl.Close()
	}
	h, lines := cfg.settingsNotes()
	if !slices.Equal(h["protocols"].([]string), cfg.Protocols) || len(lines) != 1 || !strings.HasPrefix(lines[0], "Protocols: "+strings.Join(cfg.Protocols, ", ")) {
		t.Fatalf("header %v, lines %q", h, lines)
	}
	for _, bad := range []struct {
		protocols []string
		clients   int
	}{{[]string{"smtp"}, 8}, {apiclient.Protocols(), len(apiclient.Protocols()) - 1}} {
		cfg.Protocols, cfg.Clients = bad.protocols, bad.clients
		if err := cfg.Validate(); err == nil {
			t.Errorf("--protocols %v with %d clients validated", bad.protocols, bad.clients)
		}
	}
}

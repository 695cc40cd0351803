package nodetest

import (
	"log/slog"
	"net"
	"testing"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/grpcapi"
	"github.com/raftlock/raftlock/node/httpapi"
)

// NewWithAPI is New with every member also serving its API port as a
// member does (gRPC beside the HTTP/JSON API, without TLS) on an address
// it announces to the others (node.Config.APIAddr), so a follower sends
// callers to the leader's; apis are those addresses. The API is served by
// the members as they first started: a member restarted serves none.
func NewWithAPI(t testing.TB, size int, tune func(*node.Config)) (c *Cluster, apis map[uint64]string) {
	t.Helper()
	apis = map[uint64]string{}
	for id := uint64(1); id <= uint64(size); id++ {
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		apis[id] = addr
	}
	c = New(t, size, func(cfg *node.Config) {
		cfg.APIAddr = apis[cfg.ID]
		if tune != nil {
			tune(cfg)
		}
	})
	for _, id := range c.IDs() {
		ln, err := net.Listen("tcp", apis[id])
		if err != nil {
			t.Fatal(err)
		}
		g := grpcapi.New(c.Server(id), c.Node(id), 0)
		srv := httpapi.NewServer(g.Handler(httpapi.New(c.Server(id), c.Node(id), 0)), slog.New(slog.DiscardHandler))
		go srv.Serve(ln)
		t.Cleanup(func() { g.Close(); srv.Close() })
	}
	return c, apis
}

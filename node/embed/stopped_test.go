package embed_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/internal/cliflag"
	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/nodetest"
)

// A member whose node stopped by itself (its removal applied, or a fatal
// error) ends its client connections with a goaway, as SIGTERM does. A
// connection broken under a request leaves its caller an unknown outcome,
// which the client must report (never retry): removing a member made
// callers fail before it did this.
func TestStoppedNodeSendsGoAway(t *testing.T) {
	var addrs [2]string
	for i := range addrs {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = a
	}
	var m embed.Flags
	if _, err := cliflag.Parse(&m, "node", "--id", "1", "--peers", "1="+addrs[0], "--listen", addrs[1], "--data", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	peers, join, err := m.Peers(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := m.MemberConfig(peers, join)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := embed.Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mb.Close)

	nc, err := net.Dial("tcp", addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second)) // a broken member fails the test instead of hanging it
	io.WriteString(nc, wire.Greeting)
	r := bufio.NewReader(nc)
	if err := wire.CheckGreeting(r); err != nil {
		t.Fatal(err)
	}

	mb.Node().Close() // what its removal does to the node
	<-mb.Node().Done()
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopped <- mb.Stopped(ctx)
	}()

	nodetest.ExpectGoAway(t, r, "the node stopped")
	nc.Close()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stopped did not return after the client left")
	}
}

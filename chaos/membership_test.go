package chaos

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node/peer"
)

// A gateway carries each stream on the directed link its hello names: a
// cut link (1 -> 3) swallows member 1's messages while member 2's, sent to
// the same address, arrive; a stream that opens with no hello is closed.
func TestGatewayRoutesByHelloSender(t *testing.T) {
	sink := newFrameSink(t)
	links := map[int]*Proxy{1: newLink(sink.addr, 1), 2: newLink(sink.addr, 2)}
	g, err := NewGateway(3, func(from int) *Proxy { return links[from] })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, p := range links {
		defer p.Close()
	}
	links[1].SetBlocked(true)
	dial := func(from uint64) net.Conn {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		writeFrame(t, c, peer.EncodeHello(from, 3, "127.0.0.1:1"))
		writeFrame(t, c, []byte{byte(from), 'm', 's', 'g'})
		return c
	}
	dial(1)
	dial(2)
	if a := sink.next(t); !bytes.HasPrefix(a.payload, []byte("RLP1\x02")) {
		t.Fatalf("first frame through the gateway %q, want member 2's hello", a.payload)
	}
	if a := sink.next(t); !bytes.Equal(a.payload, []byte{2, 'm', 's', 'g'}) {
		t.Fatalf("second frame %q, want member 2's message", a.payload)
	}
	waitFor(t, func() bool { return links[1].Counts().Blackholed > 0 })
	select {
	case a := <-sink.frames:
		t.Fatalf("a frame of the cut link 1->3 arrived: %q", a.payload)
	case <-time.After(100 * time.Millisecond):
	}
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	writeFrame(t, c, []byte("GET / HTTP/1.1"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a stream without a hello was not closed")
	}
}

package nodetest

import (
	"net"
	"testing"
)

// A port another process binds after it was picked fails the start with
// "address already in use", which makes the cluster start again on new
// addresses instead of failing the test that wanted it.
func TestStartRetriesWhenAPickedPortIsTaken(t *testing.T) {
	// Another socket holds member 2's client address, as another process
	// would once the address was picked.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := newCluster(t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Clients[2] = ln.Addr().String()
	err = d.startEach()
	if err == nil {
		d.Close()
		t.Fatal("a member started on an address another socket holds")
	}
	if !d.retryStart(1, err) {
		t.Fatalf("start failed with %v, which retryStart does not retry", err)
	}
}

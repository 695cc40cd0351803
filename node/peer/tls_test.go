package peer

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/tlsconfig"
)

// certs writes a PKI for three members into a directory.
func certs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := tlsconfig.Init(tlsconfig.InitOptions{Dir: dir, Members: 3, Clients: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T, dir, name string) *tlsconfig.Reloader {
	t.Helper()
	r, err := tlsconfig.Load(tlsconfig.Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// member1 runs member 1's transport with TLS and an identity.
func member1(t *testing.T, dir string) (*TCP, *recorder, *Identity) {
	t.Helper()
	peers := freeport.ForIDs(t, 1, 2, 3)
	ident := testIdentity(t, 0, peers)
	rec := &recorder{}
	tr := startTransport(t, Config{ID: 1, Peers: peers, ClientAddr: "127.0.0.1:1", TLS: load(t, dir, "member-1"), Identity: ident}, rec)
	return tr, rec, ident
}

func dialAs(t *testing.T, tr *TCP, r *tlsconfig.Reloader) net.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", tr.listenAddr, r.PeerClientConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// With TLS, a hello must name the member the certificate is bound to; a
// plain-TCP stream never gets past the handshake; a client certificate is
// no member's.
func TestHelloMustMatchCertificate(t *testing.T) {
	dir := certs(t)
	tr, rec, ident := member1(t, dir)
	m2, admin := load(t, dir, "member-2"), load(t, dir, "client-admin")
	// A hello as member from of this cluster, then a heartbeat carrying
	// an absurd commit index.
	heartbeat := func(from uint64) []byte {
		return append(helloFrame(from, 1, &Identity{ClusterID: ident.ClusterID, Incarnation: 5}, ""), heartbeatFrame(from, 1, 1<<40)...)
	}

	plain, err := net.Dial("tcp", tr.listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	if !send(t, plain, heartbeat(2)) {
		t.Error("a plain-TCP forged heartbeat kept its stream open")
	}
	if !send(t, dialAs(t, tr, m2), heartbeat(3)) {
		t.Error("member 2's certificate claiming member 3 kept its stream open")
	}
	if c, err := tls.Dial("tcp", tr.listenAddr, admin.PeerClientConfig(1)); err == nil {
		if !send(t, c, heartbeat(2)) {
			t.Error("a client certificate claiming member 2 kept its stream open")
		}
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d forged messages reached raft", n)
	}
	if send(t, dialAs(t, tr, m2), heartbeat(2)) {
		t.Error("member 2 speaking as itself was cut off")
	}
	if n := rec.count(); n != 1 {
		t.Fatalf("member 2's own heartbeat: %d messages delivered, want 1", n)
	}
}

// A dialled peer must present the certificate of the member it was
// dialled as.
func TestDialChecksThePeersID(t *testing.T) {
	dir := certs(t)
	tr, _, _ := member1(t, dir)
	// member 1's port, dialled as if it were member 3's.
	c, err := tls.Dial("tcp", tr.listenAddr, load(t, dir, "member-2").PeerClientConfig(3))
	if err == nil {
		c.Close()
		t.Fatal("member 1's certificate was accepted as member 3's")
	}
	if !strings.Contains(err.Error(), "certificate of member 1") {
		t.Fatalf("error %q does not say whose certificate it was", err)
	}
}

// A hello from another cluster is refused; so is a known member with a new
// incarnation once its old one acknowledged entries, and the record
// survives a restart.
func TestHelloIdentity(t *testing.T) {
	dir := t.TempDir()
	peers := map[uint64]string{1: "a:1", 2: "b:1", 3: "c:1"}
	id, err := OpenIdentity(dir, 0, peers)
	if err != nil {
		t.Fatal(err)
	}
	if id.ClusterID != ClusterIDFromPeers(peers) {
		t.Fatal("cluster id not derived from the peers")
	}
	if err := id.check(2, id.ClusterID+1, 7, 0); err == nil || !strings.Contains(err.Error(), "cluster") {
		t.Fatalf("other cluster: %v", err)
	}
	if err := id.check(2, 0, 0, 0); err == nil {
		t.Fatal("a hello without cluster identity was accepted")
	}
	// Before member 2 acknowledged anything, any incarnation may come.
	if err := id.check(2, id.ClusterID, 7, 0); err != nil {
		t.Fatal(err)
	}
	heartbeatResp := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeatResp.Enum()}
	id.noteAck(2, 7, heartbeatResp)
	if err := id.check(2, id.ClusterID, 8, 0); err != nil {
		t.Fatalf("a heartbeat answer acknowledges nothing, yet: %v", err)
	}
	id.noteAck(2, 7, &raftpb.Message{Type: raftpb.MessageType_MsgAppResp.Enum(), Index: proto.Uint64(5)})
	if err := id.check(2, id.ClusterID, 7, 0); err != nil {
		t.Fatal(err)
	}
	if err := id.check(2, id.ClusterID, 8, 0); err == nil || !strings.Contains(err.Error(), "incarnation") {
		t.Fatalf("new incarnation after an acknowledged append: %v", err)
	}
	again, err := OpenIdentity(dir, 0, map[uint64]string{1: "moved:1", 2: "b:1", 3: "c:1"})
	if err != nil {
		t.Fatal(err)
	}
	if again.ClusterID != id.ClusterID || again.Incarnation != id.Incarnation {
		t.Fatal("the stored identity did not survive a restart (or the peer list overrode it)")
	}
	if err := again.check(2, id.ClusterID, 8, 0); err == nil {
		t.Fatal("the acknowledged incarnation was forgotten across a restart")
	}
	if err := again.check(2, id.ClusterID, 7, id.Incarnation+1); err == nil || !strings.Contains(err.Error(), "data directory was lost") {
		t.Fatalf("a peer remembering another incarnation of this member: %v", err)
	}
	if err := again.check(2, id.ClusterID, 7, id.Incarnation); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenIdentity(dir, id.ClusterID+1, peers); err == nil {
		t.Fatal("a --cluster-id other than the stored one was accepted")
	}
}

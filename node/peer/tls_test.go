package peer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// issueAs writes a certificate from dir's CA with tmpl's names and usages
// as dir/name.pem and dir/name-key.pem, what an operator could issue by
// hand.
func issueAs(t *testing.T, dir, name string, tmpl *x509.Certificate) {
	t.Helper()
	ca, err := tlsconfig.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
}

// A client certificate that calls itself member 2 (common name member-2,
// client authentication only; or even member 2's URI without server
// authentication) is no member on the peer port: its forged heartbeats,
// with a term that would depose any leader, never reach raft.
func TestMemberNamedClientCertificateIsNoPeer(t *testing.T) {
	dir := certs(t)
	tr, rec, ident := member1(t, dir)
	u, _ := url.Parse(tlsconfig.MemberURI(2))
	issueAs(t, dir, "client-cn-member-2", &x509.Certificate{Subject: pkix.Name{CommonName: "member-2"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	issueAs(t, dir, "client-uri-member-2", &x509.Certificate{Subject: pkix.Name{CommonName: "member-2"}, URIs: []*url.URL{u}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	forged := append(helloFrame(2, 1, &Identity{ClusterID: ident.ClusterID, Incarnation: 5}, ""), heartbeatFrame(2, 1, 0)...)
	for _, name := range []string{"client-cn-member-2", "client-uri-member-2"} {
		c, err := tls.Dial("tcp", tr.listenAddr, load(t, dir, name).PeerClientConfig(1))
		if err != nil {
			continue // refused in the handshake already
		}
		if !send(t, c, forged) {
			t.Errorf("%s: the stream of a client certificate claiming member 2 stayed open", name)
		}
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d messages from client certificates calling themselves member 2 reached raft", n)
	}
	// Member 2's own certificate still speaks as member 2.
	if send(t, dialAs(t, tr, load(t, dir, "member-2")), forged) {
		t.Error("member 2 speaking as itself was cut off")
	}
	if n := rec.count(); n != 1 {
		t.Fatalf("member 2's own heartbeat: %d messages delivered, want 1", n)
	}
}

// syncBuffer is a log destination safe for the transport's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A hello as member 2 with another incarnation than the one that
// acknowledged entries is refused, and the log line says so without the
// recorded incarnation (all a forged hello would need, without TLS), nor
// this member's own.
func TestIncarnationRefusalKeepsTheRealIncarnationOutOfTheLog(t *testing.T) {
	peers := freeport.ForIDs(t, 1, 2, 3)
	var logs syncBuffer
	m1, rec1 := startMember(t, 1, peers, 0x1ca, func(cfg *Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	const real = 0xfeedfacecafe
	if err := m1.identity.noteAck(2, real, &raftpb.Message{Type: raftpb.MessageType_MsgAppResp.Enum()}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", m1.listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	forged := append(helloFrame(2, 1, &Identity{ClusterID: 0x1ca, Incarnation: 0xbad}, ""), heartbeatFrame(2, 1, 0)...)
	if !send(t, c, forged) {
		t.Fatal("a hello with a forged incarnation kept its stream open")
	}
	if rec1.count() != 0 {
		t.Fatal("a hello with a forged incarnation reached raft")
	}
	eventually(t, "the refusal's log line", func() {}, func() bool { return strings.Contains(logs.String(), "refused: incarnation bad") })
	for _, secret := range []uint64{real, m1.identity.Incarnation} {
		if s := fmt.Sprintf("%x", secret); strings.Contains(logs.String(), s) {
			t.Fatalf("the log reveals incarnation %s:\n%s", s, logs.String())
		}
	}
	// And a hello that remembers another incarnation of member 1.
	c, err = net.Dial("tcp", m1.listenAddr)
	if err != nil {
		t.Fatal(err)
	}
	other := &Identity{ClusterID: 0x1ca, Incarnation: real, seen: map[uint64]uint64{1: 0xbee}}
	send(t, c, append(helloFrame(2, 1, other, ""), heartbeatFrame(2, 1, 0)...))
	eventually(t, "the second refusal's log line", func() {}, func() bool { return strings.Contains(logs.String(), "remembers this member as incarnation bee") })
	if s := fmt.Sprintf("%x", m1.identity.Incarnation); strings.Contains(logs.String(), s) {
		t.Fatalf("the log reveals this member's incarnation %s:\n%s", s, logs.String())
	}
}

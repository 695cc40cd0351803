package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/internal/tlsconfig"
	"github.com/raftlock/raftlock/node/embed"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/peer"
)

// tlsCluster is a three-member cluster with certificates from
// `raftlock certs init` (clients admin and batch) and, when acl is set, an
// ACL file.
type tlsCluster struct {
	*processCluster
	certs, acl string
}

func newTLSCluster(t *testing.T, acl string) *tlsCluster {
	t.Helper()
	return newTLSClusterFor(t, acl, "admin,batch", nil)
}

// newTLSClusterFor is newTLSCluster with certificates for the clients
// named (comma-separated) and more flags for each member from more (nil:
// none).
func newTLSClusterFor(t *testing.T, acl, clients string, more func(m *processMember) []string) *tlsCluster {
	t.Helper()
	bin := buildBinary(t)
	tc := &tlsCluster{certs: t.TempDir()}
	if r := runCLI(t, bin, nil, "certs", "init", "--out", tc.certs, "--members", "3", "--clients", clients); r.code != 0 {
		t.Fatalf("certs init: exit %d: %s", r.code, r.stderr)
	}
	if acl != "" {
		tc.acl = filepath.Join(tc.certs, "acl.json")
		if err := os.WriteFile(tc.acl, []byte(acl), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tc.processCluster = newProcessClusterWith(t, 3, func(m *processMember) []string {
		files := tc.memberFiles(m.id)
		args := []string{"--listen", m.client, "--cert", files.Cert, "--key", files.Key, "--ca", files.CA}
		if tc.acl != "" {
			args = append(args, "--acl", tc.acl)
		}
		if more != nil {
			args = append(args, more(m)...)
		}
		return args
	}, "--log-level", "info")
	return tc
}

// memberFiles are member id's certificate, key and CA.
func (tc *tlsCluster) memberFiles(id int) tlsconfig.Files {
	return tlsconfig.Files{
		Cert: filepath.Join(tc.certs, fmt.Sprintf("member-%d.pem", id)),
		Key:  filepath.Join(tc.certs, fmt.Sprintf("member-%d-key.pem", id)),
		CA:   filepath.Join(tc.certs, "ca.pem"),
	}
}

// as is the environment of a CLI run as client name (certificate, key and
// CA in RAFTLOCK_* variables, as an operator would set them).
func (tc *tlsCluster) as(name string) []string {
	return []string{
		"RAFTLOCK_ENDPOINTS=" + strings.Join(tc.endpoints(), ","),
		"RAFTLOCK_CERT=" + filepath.Join(tc.certs, "client-"+name+".pem"),
		"RAFTLOCK_KEY=" + filepath.Join(tc.certs, "client-"+name+"-key.pem"),
		"RAFTLOCK_CA=" + filepath.Join(tc.certs, "ca.pem"),
	}
}

// acquire takes key as name, retrying while the cluster elects a leader.
func (tc *tlsCluster) acquire(t *testing.T, name, key string) uint64 {
	t.Helper()
	var r cliResult
	nodetest.WaitFor(t, 20*time.Second, fmt.Sprintf("%s to acquire %s", name, key), func() bool {
		r = runCLI(t, tc.bin, tc.as(name), "acquire", key, "--lease", "1h", "--json", "--timeout", "3s")
		return r.code == 0
	})
	var g struct{ Token uint64 }
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil {
		t.Fatal(err)
	}
	return g.Token
}

// leader returns the leader's id as the admin client sees it.
func (tc *tlsCluster) leader(t *testing.T) uint64 {
	t.Helper()
	r := runCLI(t, tc.bin, tc.as("admin"), "status", "--json")
	var st struct {
		Nodes []struct {
			ID   uint64
			Role string
		}
	}
	json.Unmarshal([]byte(r.stdout), &st)
	for _, n := range st.Nodes {
		if n.Role == "leader" {
			return n.ID
		}
	}
	t.Fatalf("no leader in status: %s %s", r.stdout, r.stderr)
	return 0
}

// hangUpAll sends every member SIGHUP, one after the other, each once
// the one before logged what.
func (tc *tlsCluster) hangUpAll(what string) {
	for _, m := range tc.members {
		tc.hangUp(m, what)
	}
}

func (tc *tlsCluster) waitLog(t *testing.T, m *processMember, what string) {
	t.Helper()
	nodetest.WaitFor(t, 10*time.Second, fmt.Sprintf("member %d to log %q", m.id, what), func() bool {
		return strings.Contains(tc.fullLog(m), what)
	})
}

func oneLine(t *testing.T, what string, r cliResult, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d: %s", what, r.code, code, r.stderr)
	}
	if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || r.stderr == "" {
		t.Fatalf("%s: %d lines of error, want one: %q", what, lines, r.stderr)
	}
}

// The security issue end to end over real processes: certs init, a
// three-member mutual-TLS cluster, clients with and without certificates,
// the ACL (exit 6) and its reload on SIGHUP, and a forged plain-TCP
// heartbeat on a peer port.
func TestTLSClusterEndToEnd(t *testing.T) {
	startsProcesses(t)
	tc := newTLSCluster(t, `{"rules":[{"identity":"batch","prefixes":["jobs/"],"rights":["lock","read"]},`+
		`{"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]}]}`)

	// Acquire and release with a client certificate.
	tok := tc.acquire(t, "admin", "job")
	if r := runCLI(t, tc.bin, tc.as("admin"), "release", "job", "--token", strconv.FormatUint(tok, 10)); r.code != 0 {
		t.Fatalf("release: exit %d: %s", r.code, r.stderr)
	}

	// No certificate: a one-line error at once, exit 1.
	start := time.Now()
	r := runCLI(t, tc.bin, []string{"RAFTLOCK_ENDPOINTS=" + strings.Join(tc.endpoints(), ",")}, "acquire", "nocert")
	oneLine(t, "acquire without a certificate", r, exitError)
	if !strings.Contains(r.stderr, "requires TLS") {
		t.Errorf("without a certificate the error does not say TLS is required: %q", r.stderr)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("without a certificate the CLI took %v to fail (retried to its deadline)", time.Since(start))
	}
	// status says why too, not only "no member reachable".
	r = runCLI(t, tc.bin, []string{"RAFTLOCK_ENDPOINTS=" + strings.Join(tc.endpoints(), ",")}, "status")
	if r.code != exitError || !strings.Contains(r.stderr, "no member reachable") || !strings.Contains(r.stderr, "requires TLS") {
		t.Errorf("status without a certificate: exit %d, %q; want 1 naming TLS", r.code, r.stderr)
	}
	// A certificate from another CA, trusting either CA.
	other := t.TempDir()
	if r := runCLI(t, tc.bin, nil, "certs", "init", "--out", other, "--members", "1"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, ca := range []string{filepath.Join(other, "ca.pem"), filepath.Join(tc.certs, "ca.pem")} {
		env := []string{"RAFTLOCK_ENDPOINTS=" + strings.Join(tc.endpoints(), ","),
			"RAFTLOCK_CERT=" + filepath.Join(other, "client-admin.pem"), "RAFTLOCK_KEY=" + filepath.Join(other, "client-admin-key.pem"),
			"RAFTLOCK_CA=" + ca}
		oneLine(t, "acquire with another CA's certificate", runCLI(t, tc.bin, env, "acquire", "foreign"), exitError)
	}

	// The ACL: batch may lock jobs/ only.
	r = runCLI(t, tc.bin, tc.as("batch"), "acquire", "other/x")
	oneLine(t, "batch acquiring other/x", r, exitPermission)
	if !strings.Contains(r.stderr, "permission denied") {
		t.Errorf("refusal does not say permission denied: %q", r.stderr)
	}
	if r := runCLI(t, tc.bin, tc.as("batch"), "acquire", "jobs/x"); r.code != 0 {
		t.Fatalf("batch acquiring jobs/x: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, tc.bin, tc.as("batch"), "status")
	oneLine(t, "batch asking for status", r, exitPermission)
	// Every member answered, refusing: reachable, with the reason, never
	// "unreachable".
	if strings.Contains(r.stdout, "unreachable") || strings.Count(r.stdout, " refused ") != len(tc.members) ||
		!strings.Contains(r.stdout, `: permission denied: identity "batch" may not ask for status`) {
		t.Errorf("batch asking for status: members not shown as refused, with the reason:\n%s", r.stdout)
	}
	r = runCLI(t, tc.bin, tc.as("batch"), "status", "--json")
	var refused struct {
		Nodes []struct{ Role, Error string } `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &refused); err != nil || r.code != exitPermission || len(refused.Nodes) != len(tc.members) {
		t.Errorf("batch asking for status --json: exit %d, %q (%v)", r.code, r.stdout, err)
	}
	for _, n := range refused.Nodes {
		if n.Role != "refused" || !strings.Contains(n.Error, "may not ask for status") {
			t.Errorf("batch asking for status --json: node %+v, want role refused with the reason", n)
		}
	}

	// A forged heartbeat in plain TCP to a follower's peer port: a hello
	// claiming the leader, then a commit index of 2^40.
	leader := tc.leader(t)
	var f *processMember
	for _, m := range tc.members {
		if uint64(m.id) != leader {
			f = m
		}
	}
	c, err := net.Dial("tcp", f.peer)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := proto.Marshal(&raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(leader),
		To: proto.Uint64(uint64(f.id)), Term: proto.Uint64(1 << 20), Commit: proto.Uint64(1 << 40)})
	c.Write(peer.AppendFrame(peer.AppendFrame(nil, peer.EncodeHello(leader, uint64(f.id), "127.0.0.1:1")), hb))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, c)
	c.Close()
	tc.waitLog(t, f, "TLS handshake")
	if r := runCLI(t, tc.bin, tc.as("batch"), "acquire", "jobs/after-forgery", "--timeout", "5s"); r.code != 0 {
		t.Fatalf("acquire after the forged heartbeat: exit %d: %s", r.code, r.stderr)
	}
	if l := tc.leader(t); l != leader {
		t.Errorf("leadership moved from %d to %d after the forged heartbeat", leader, l)
	}

	// ACL reload on SIGHUP: batch gets other/; then a broken file keeps
	// the ACL in force.
	os.WriteFile(tc.acl, []byte(`{"rules":[{"identity":"batch","prefixes":["jobs/","other/"],"rights":["lock","read"]},`+
		`{"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]}]}`), 0o644)
	tc.hangUpAll("SIGHUP: ACL reloaded")
	if r := runCLI(t, tc.bin, tc.as("batch"), "acquire", "other/x"); r.code != 0 {
		t.Fatalf("batch acquiring other/x after the reload: exit %d: %s", r.code, r.stderr)
	}
	os.WriteFile(tc.acl, []byte(`{"rules":[{"identity":"batch"}]}`), 0o644)
	tc.hangUpAll("SIGHUP: ACL not reloaded")
	if r := runCLI(t, tc.bin, tc.as("batch"), "acquire", "other/y"); r.code != 0 {
		t.Fatalf("a broken ACL file replaced the one in force: exit %d: %s", r.code, r.stderr)
	}

	// A member restarted below must find a valid ACL.
	os.WriteFile(tc.acl, []byte(`{"rules":[{"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]}]}`), 0o644)

	// Certificate rotation on SIGHUP: member 1 serves a new certificate
	// from the same CA, and its peers accept it.
	m1 := tc.members[0]
	ca, err := tlsconfig.LoadCA(filepath.Join(tc.certs, "ca.pem"), filepath.Join(tc.certs, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	next, err := ca.Member(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := tlsconfig.Load(tlsconfig.Files{Cert: filepath.Join(tc.certs, "client-admin.pem"),
		Key: filepath.Join(tc.certs, "client-admin-key.pem"), CA: filepath.Join(tc.certs, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		cfg := admin.ClientConfig()
		cfg.ServerName = "127.0.0.1"
		c, err := tls.Dial("tcp", m1.client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := served()
	os.WriteFile(filepath.Join(tc.certs, "member-1.pem"), next.CertPEM, 0o644)
	os.WriteFile(filepath.Join(tc.certs, "member-1-key.pem"), next.KeyPEM, 0o600)
	if served() != before {
		t.Fatal("the new certificate was served before SIGHUP")
	}
	tc.hangUp(m1, "SIGHUP: certificates reloaded")
	if got, want := served(), parseSerial(t, next.CertPEM); got != want {
		t.Fatalf("after SIGHUP member 1 serves serial %s, want the new certificate's %s", got, want)
	}
	// New peer streams with member 1 (member 3 restarted), and member 1
	// in every quorum (member 2 stopped).
	tc.kill(tc.members[1])
	tc.kill(tc.members[2])
	tc.start(tc.members[2])
	tc.acquire(t, "admin", "after-rotation")
	for _, m := range []*processMember{tc.members[0], tc.members[2]} {
		if !m.running() {
			t.Fatalf("member %d exited:\n%s", m.id, tc.log(m))
		}
	}
}

func parseSerial(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// A process with a valid member certificate but another cluster id, and a
// member restarted with an empty data directory under its old id, are
// refused by the leader, which says why; the cluster keeps serving.
func TestStrangerAndWipedMemberRefused(t *testing.T) {
	startsProcesses(t)
	tc := newTLSCluster(t, "")
	tc.acquire(t, "admin", "before")
	leaderID := tc.leader(t)
	var leader, follower *processMember
	for _, m := range tc.members {
		if uint64(m.id) == leaderID {
			leader = m
		} else {
			follower = m
		}
	}
	// The leader has recorded the follower's incarnation once it
	// acknowledged an append.
	nodetest.WaitFor(t, 10*time.Second, fmt.Sprintf("the leader to record member %d's incarnation", follower.id), func() bool {
		b, _ := os.ReadFile(filepath.Join(tc.dataDir(leader.id), "peers.json"))
		return strings.Contains(string(b), fmt.Sprintf("%q", strconv.Itoa(follower.id)))
	})

	// A stranger: member-N's valid certificate, another cluster id.
	peers := map[uint64]string{}
	for _, m := range tc.members {
		peers[uint64(m.id)] = m.peer
	}
	peers[uint64(follower.id)] = freeport.For(t)
	stranger, exited := spawn(t, tc.bin, filepath.Join(t.TempDir(), "stranger.log"), embed.Args{
		ID: uint64(follower.id), Peers: peers, Listen: freeport.For(t), Data: filepath.Join(t.TempDir(), "stranger"),
		ClusterID: "00000000deadbeef", TLS: tc.memberFiles(follower.id),
	}.Argv())
	tc.waitLog(t, leader, "it is in cluster 00000000deadbeef")
	stranger.Process.Kill()
	<-exited
	tc.acquire(t, "admin", "after-stranger")

	// The follower loses its data directory and comes back under its id.
	tc.kill(follower)
	if err := os.RemoveAll(tc.dataDir(follower.id)); err != nil {
		t.Fatal(err)
	}
	tc.start(follower)
	tc.waitLog(t, leader, fmt.Sprintf("hello from member %d refused: incarnation", follower.id))
	tc.waitLog(t, follower, "data directory was lost or replaced")
	tc.acquire(t, "admin", "after-wipe")
	for _, m := range tc.members {
		if !m.running() {
			t.Fatalf("member %d exited:\n%s", m.id, tc.log(m))
		}
	}
}

// A member that would serve a non-loopback address without certificates
// refuses to start with one line naming the way out, and creates nothing
// (node/embed's TestSecurityChecks has the rest).
func TestSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--peers", "1=10.0.0.1:7001"},
		{"--peers", "1=127.0.0.1:7001", "--listen", "0.0.0.0:8001"},
		{"--peers", "1=127.0.0.1:7001", "--peer-listen", ":7001"},
		{"--peers", "1=127.0.0.1:7001", "--http", "192.168.1.4:9001"},
		{"--peers", "1=127.0.0.1:7001", "--advertise-client", "db1.example:8001"},
	} {
		full := append([]string{"node", "--id", "1", "--data", filepath.Join(dir, "d")}, args...)
		code, _, errOut := cli(t, full...)
		if code != exitError {
			t.Errorf("%v: exit %d, want %d", args, code, exitError)
		}
		if strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "--cert, --key and --ca") || !strings.Contains(errOut, "--insecure") {
			t.Errorf("%v: error %q does not name --cert/--key/--ca and --insecure on one line", args, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); err == nil {
		t.Error("a refused member created its data directory")
	}
}

// TestProbesAndAddedClientUnderTLSAndACL: under TLS and an ACL, a probe or
// a scraper without a client certificate reads /metrics and /healthz on
// --metrics-listen (and nothing else there), and a client certificate
// signed afterwards by `certs add-client` is accepted by the running
// cluster at once.
func TestProbesAndAddedClientUnderTLSAndACL(t *testing.T) {
	startsProcesses(t)
	metrics := map[int]string{}
	tc := newTLSClusterFor(t, `{"rules":[{"identity":"admin","prefixes":[""],"rights":["lock","read","admin"]},`+
		`{"identity":"carol","prefixes":["carol/"],"rights":["lock","read"]}]}`, "admin", func(m *processMember) []string {
		metrics[m.id] = freeport.For(t)
		return []string{"--metrics-listen", metrics[m.id]}
	})
	tc.acquire(t, "admin", "job")
	plain := &http.Client{Timeout: 5 * time.Second}
	get := func(url string) (int, string) {
		resp, err := plain.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, m := range tc.members {
		base := "http://" + metrics[m.id]
		nodetest.WaitFor(t, 20*time.Second, fmt.Sprintf("member %d's /healthz on --metrics-listen", m.id), func() bool {
			code, body := get(base + "/healthz")
			return code == http.StatusOK && body == "ok\n"
		})
		if code, body := get(base + "/metrics"); code != http.StatusOK || !strings.Contains(body, "raftlock_") {
			t.Errorf("member %d: GET /metrics without a certificate: %d %.200q", m.id, code, body)
		}
		// Only those two: status and the console show keys and owners.
		for _, path := range []string{"/status", "/", "/v1/members"} {
			if code, _ := get(base + path); code != http.StatusNotFound {
				t.Errorf("member %d: GET %s on --metrics-listen: %d, want 404", m.id, path, code)
			}
		}
	}

	// A client added to the running cluster's CA: the ACL already names
	// carol; her certificate did not exist when the members started.
	r := runCLI(t, tc.bin, nil, "certs", "add-client", "carol", "--out", tc.certs, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, "client-carol.pem") {
		t.Fatalf("certs add-client carol: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	tc.acquire(t, "carol", "carol/x")
	r = runCLI(t, tc.bin, tc.as("carol"), "acquire", "other/x")
	oneLine(t, "carol acquiring outside her prefix", r, exitPermission)
	if !strings.Contains(r.stderr, `"carol"`) {
		t.Errorf("refusal does not name the added identity: %q", r.stderr)
	}
	// Adding her again is refused without --force, and loses nothing.
	if r := runCLI(t, tc.bin, nil, "certs", "add-client", "carol", "--out", tc.certs); r.code != exitError || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("certs add-client over an existing one: exit %d: %s", r.code, r.stderr)
	}
	tc.acquire(t, "carol", "carol/y")
}

package nodetest

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/raftlock/raftlock/internal/freeport"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/grpcapi"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/server"
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
		p := &apiPort{grpc: grpcapi.New(c.Server(id), c.Node(id), server.Limits{}), killed: make(chan struct{})}
		p.srv = httpapi.NewServer(p.holding(p.grpc.Handler(httpapi.New(c.Server(id), c.Node(id), server.Limits{}))), server.Limits{}, slog.New(slog.DiscardHandler))
		go p.srv.Serve(ln)
		t.Cleanup(p.close)
		c.mu.Lock()
		if c.apis == nil {
			c.apis = map[uint64]*apiPort{}
		}
		c.apis[id] = p
		c.mu.Unlock()
	}
	return c, apis
}

// apiPort is a member's API port as NewWithAPI serves it.
type apiPort struct {
	srv    *http.Server
	grpc   *grpcapi.API
	killed chan struct{} // closed by KillMember: held answers are dropped

	mu   sync.Mutex
	held chan string // set by HoldAnswers: each call whose answer is held
}

// holding is h, except that once HoldAnswers was called each call's
// answer is held back until the member is killed, and then dropped.
func (p *apiPort) holding(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		held := p.held
		p.mu.Unlock()
		if held == nil {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&heldWriter{ResponseWriter: w, path: r.URL.Path, held: held, killed: p.killed}, r)
	})
}

// close stops serving: the API's streams and calls end, its connections
// close.
func (p *apiPort) close() {
	p.srv.Close()
	p.grpc.Close()
}

// heldWriter holds back an answer: its first write reports the call as
// held and waits until the member is killed; then nothing is written.
// The call itself has run by then (a grant applied, a read was
// confirmed): only its answer is lost, as when a process dies between
// deciding and answering.
type heldWriter struct {
	http.ResponseWriter
	path   string
	held   chan<- string
	killed <-chan struct{}
	once   sync.Once
}

// errKilled is what a write of a held answer returns.
var errKilled = errors.New("nodetest: the member was killed before it answered")

func (w *heldWriter) hold() {
	w.once.Do(func() {
		select {
		case w.held <- w.path:
		case <-w.killed:
		}
	})
	<-w.killed
}

func (w *heldWriter) WriteHeader(int) { w.hold() }

func (w *heldWriter) Write([]byte) (int, error) {
	w.hold()
	return 0, errKilled
}

// Flush is the http.Flusher gRPC's handler requires; it writes nothing.
func (w *heldWriter) Flush() { w.hold() }

// HoldAnswers makes member id's API run every call it takes from now on
// and hold back its answer until KillMember kills the member, which drops
// it: a call in flight on a member that dies after deciding it and before
// answering, at a moment the test chooses, the one case where even a
// grant that applied is unknown to its caller. Each held call's URL path
// (for gRPC, /raftlock.v1.Locks/METHOD) comes on the returned channel.
// Only for a member of a cluster made by NewWithAPI.
func (c *Cluster) HoldAnswers(id uint64) <-chan string {
	t := c.tb("HoldAnswers")
	t.Helper()
	c.mu.Lock()
	p := c.apis[id]
	c.mu.Unlock()
	if p == nil {
		t.Fatalf("HoldAnswers: member %d serves no API", id)
	}
	held := make(chan string, 16)
	p.mu.Lock()
	p.held = held
	p.mu.Unlock()
	return held
}

// KillMember stops member id as a crash of its process would: the
// connections of its API port (NewWithAPI) are cut first, so a call in
// flight there gets no answer at all (unlike StopMember, after which the
// API answers what reaches it unavailable, as a member stopping does), and
// nothing listens there any more; then the member stops as StopMember
// stops it, its client port's connections cut before its node stops. Its
// data directory stays.
func (c *Cluster) KillMember(id uint64) {
	c.mu.Lock()
	p := c.apis[id]
	delete(c.apis, id)
	c.mu.Unlock()
	if p != nil {
		p.srv.Close() // first: no held answer may reach a caller
		close(p.killed)
		p.grpc.Close()
	}
	c.StopMember(id)
}

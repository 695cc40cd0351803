package apiclient_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftlock/raftlock/client/apiclient"
	raftlockv1 "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// Every call of the gRPC client, through a follower (its answer naming
// the leader followed), with the binary client's errors; tags reach the
// leader's log (checkLockCalls).
func TestGRPCCallsThroughAFollower(t *testing.T) {
	c, cl := followerClient(t, apiclient.NewGRPC)
	checkLockCalls(t, c, cl)
}

// fakeLocks is a stand-in member of the gRPC API whose Acquire and Get
// answers the test chooses; it counts the calls it got.
type fakeLocks struct {
	raftlockv1.UnimplementedLocksServer
	addr   string
	n      atomic.Int64
	answer func(n int64) error // nil: success
	hangUp func()              // closes every connection it accepted
}

func (f *fakeLocks) Acquire(context.Context, *raftlockv1.AcquireRequest) (*raftlockv1.AcquireResponse, error) {
	if err := f.answer(f.n.Add(1)); err != nil {
		return nil, err
	}
	return &raftlockv1.AcquireResponse{Key: "k", Token: 5, LeaseMs: 1000}, nil
}

func (f *fakeLocks) Get(context.Context, *raftlockv1.GetRequest) (*raftlockv1.GetResponse, error) {
	if err := f.answer(f.n.Add(1)); err != nil {
		return nil, err
	}
	return &raftlockv1.GetResponse{Key: "k"}, nil
}

// conns is a listener that remembers its connections, to cut them.
type conns struct {
	net.Listener
	mu  sync.Mutex
	all []net.Conn
}

func (l *conns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.all = append(l.all, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *conns) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.all {
		c.Close()
	}
}

func newFakeLocks(t *testing.T, answer func(f *fakeLocks, n int64) error) *fakeLocks {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &conns{Listener: ln}
	f := &fakeLocks{addr: ln.Addr().String(), hangUp: l.cut}
	f.answer = func(n int64) error { return answer(f, n) }
	srv := grpc.NewServer()
	raftlockv1.RegisterLocksServer(srv, f)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return f
}

// apiError is a status as the member's API answers it: code, and an Error
// detail.
func apiError(code codes.Code, e *raftlockv1.Error) error {
	st, _ := status.New(code, e.Name).WithDetails(e)
	return st.Err()
}

// A lock-changing call whose connection broke after the request went out,
// or answered UNAVAILABLE without the API's Error detail, is never sent
// again; a read is. An answer naming the leader is followed, and
// overloaded and unavailable answers (with the detail) are asked again.
func TestGRPCRetryRules(t *testing.T) {
	cut := newFakeLocks(t, func(f *fakeLocks, n int64) error {
		if n == 1 {
			f.hangUp() // before the answer, which then finds no connection
		}
		return nil
	})
	cl, err := apiclient.NewGRPC([]string{cut.addr}, apiclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	checkUnanswered(t, cl, &cut.n, "acquire") // the stand-in has no Release or Renew

	// UNAVAILABLE without the API's Error detail was made by gRPC or
	// something between (a proxy, a connection reset as a member died),
	// not by the member: it does not say that nothing was proposed.
	bare := newFakeLocks(t, func(_ *fakeLocks, n int64) error {
		if n == 1 {
			return status.Error(codes.Unavailable, "upstream connect error or disconnect/reset before headers")
		}
		return nil
	})
	cl, err = apiclient.NewGRPC([]string{bare.addr}, apiclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	checkUnanswered(t, cl, &bare.n, "acquire")

	busy := newFakeLocks(t, func(f *fakeLocks, n int64) error {
		if n <= 2 {
			return apiError(codes.Unavailable, &raftlockv1.Error{Name: "overloaded", Message: "busy"})
		}
		return nil
	})
	follower := newFakeLocks(t, func(*fakeLocks, int64) error {
		return apiError(codes.Unavailable, &raftlockv1.Error{Name: "unavailable", Message: "not the leader", LeaderId: 2, LeaderApi: busy.addr})
	})
	down := newFakeLocks(t, func(*fakeLocks, int64) error {
		return apiError(codes.Unavailable, &raftlockv1.Error{Name: "unavailable", Message: "no leader"})
	})
	for _, tc := range []struct {
		name      string
		endpoints []string
	}{
		{"overloaded", []string{busy.addr}},
		{"redirected, then overloaded", []string{follower.addr}},
		{"unavailable, then overloaded", []string{down.addr, busy.addr}},
	} {
		busy.n.Store(0)
		cl, err := apiclient.NewGRPC(tc.endpoints, apiclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkRetriedToToken5(t, tc.name, cl, &busy.n)
	}
}

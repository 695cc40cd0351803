package grpcapi_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/node/grpcapi"
	"github.com/raftlock/raftlock/node/server"
	pb "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// fakeBackend answers every call with resp, after entered is sent to and
// proceed received from when they are not nil; member 2's API is known.
type fakeBackend struct {
	resp    wire.Response
	entered chan struct{}
	proceed chan struct{}
	check   func(*wire.Request) // called with every request, if not nil
}

func (f *fakeBackend) Do(ctx context.Context, _ string, _ uint64, req *wire.Request) *wire.Response {
	if f.check != nil {
		f.check(req)
	}
	if f.entered != nil {
		f.entered <- struct{}{}
		<-f.proceed
	}
	r := f.resp
	return &r
}

func (f *fakeBackend) PeerAPIAddr(id uint64) string {
	if id == 2 {
		return "10.0.0.2:10002"
	}
	return ""
}

func (f *fakeBackend) Watch(context.Context, string, uint64, string, wire.Revision) (*node.Watch, *wire.Response) {
	r := f.resp
	return nil, &r
}

// Admit never refuses: the fake has no identities.
func (f *fakeBackend) Admit(string, server.Limit) (func(), error) { return func() {}, nil }

// Each answer of the member maps to its code and keeps its CLI name, as
// docs/grpc-api.md tables it: only outcome-unknown is UNKNOWN, only the
// answers after which nothing was proposed are UNAVAILABLE. A follower
// names the leader only with its API address: without one, it names none.
func TestEveryAnswerMapsToItsCode(t *testing.T) {
	for _, tc := range []struct {
		resp      wire.Response
		code      codes.Code
		name      string
		leaderAPI string
	}{
		{wire.Response{Op: wire.OpHeld}, codes.FailedPrecondition, "held", ""},
		{wire.Response{Op: wire.OpNotFound}, codes.NotFound, "not-found", ""},
		{wire.Response{Op: wire.OpInvalidArgument, Reason: "bad"}, codes.InvalidArgument, "invalid-argument", ""},
		{wire.Response{Op: wire.OpPermissionDenied, Reason: "no"}, codes.PermissionDenied, "permission-denied", ""},
		{wire.Response{Op: wire.OpUnavailable, Reason: "no leader known"}, codes.Unavailable, "unavailable", ""},
		{wire.Response{Op: wire.OpOverloaded, Reason: "full"}, codes.Unavailable, "overloaded", ""},
		{wire.Response{Op: wire.OpOutcomeUnknown, Reason: "leadership lost"}, codes.Unknown, "outcome-unknown", ""},
		{wire.Response{Op: wire.OpError, Reason: "disk"}, codes.Internal, "error", ""},
		{wire.Response{Op: wire.OpCompacted, Reason: "compacted: list the locks again"}, codes.OutOfRange, "compacted", ""},
		{wire.Response{Op: wire.OpRedirect, LeaderID: 2, Leader: "10.0.0.2:8002"}, codes.Unavailable, "unavailable", "10.0.0.2:10002"},
		{wire.Response{Op: wire.OpRedirect, LeaderID: 3, Leader: "10.0.0.3:8003"}, codes.Unavailable, "unavailable", ""},
	} {
		api := grpcapi.NewWithBackend(&fakeBackend{resp: tc.resp}, server.Limits{})
		_, err := api.Acquire(context.Background(), &pb.AcquireRequest{Key: "k", LeaseMs: 1000})
		e := expectStatus(t, wire.ErrorName(tc.resp.Op)+" "+tc.resp.Reason, err, tc.code, tc.name, tc.resp.Reason)
		if e.LeaderApi != tc.leaderAPI || (tc.leaderAPI != "") != (e.LeaderId != 0) {
			t.Errorf("%v: leader %d at %q, want %q", tc.resp, e.LeaderId, e.LeaderApi, tc.leaderAPI)
		}
		if unknown := strings.Contains(e.Message, "the leader is unknown"); unknown != (tc.resp.Op == wire.OpRedirect && tc.leaderAPI == "") {
			t.Errorf("%v: message %q", tc.resp, e.Message)
		}
	}
}

// Past maxInflight calls in progress, one more is answered UNAVAILABLE,
// name overloaded, without reaching the member.
func TestCallsPastTheLimitAreOverloaded(t *testing.T) {
	f := &fakeBackend{resp: wire.Response{Op: wire.OpValue}, entered: make(chan struct{}), proceed: make(chan struct{})}
	api := grpcapi.NewWithBackend(f, server.Limits{MaxConns: 1})
	done := make(chan error)
	go func() {
		_, err := api.Get(context.Background(), &pb.GetRequest{Key: "k"})
		done <- err
	}()
	<-f.entered
	_, err := api.Get(context.Background(), &pb.GetRequest{Key: "k"})
	expectStatus(t, "a call past the limit", err, codes.Unavailable, "overloaded", "limit 1")
	close(f.proceed)
	if err := <-done; err != nil {
		t.Fatalf("the call in progress: %v", err)
	}
}

// callWith decodes data into m as the API's codec does and makes call
// with it, returning the call's error (nil for data the codec cannot even
// mark).
func callWith[M proto.Message, R any](data []byte, m M, call func(context.Context, M) (R, error)) error {
	if grpcapi.Decode(data, m) != nil {
		return nil
	}
	_, err := call(context.Background(), m)
	return err
}

// No message a caller can send makes a call panic or fail without its
// Error detail (one that does not decode included), and what reaches the
// member is a request it can take: a new key (an acquire's) keeping the
// key rule, any other of 1 to 256 bytes (a list's prefix is the member's
// to check), an owner of at most 128 bytes of UTF-8.
func FuzzRequests(f *testing.F) {
	for _, m := range []proto.Message{
		&pb.AcquireRequest{Key: "jobs/a", LeaseMs: 1000, WaitMs: 10, Owner: "me"},
		&pb.ReleaseRequest{Key: "k", Token: 3},
		&pb.RenewRequest{Key: "k", Token: 3, LeaseMs: 100},
		&pb.GetRequest{Key: strings.Repeat("k", 300)},
		&pb.ListRequest{Prefix: "jobs/", Limit: 5, After: "jobs/a"},
		&pb.GetRequest{KeyBytes: []byte("u8/\xff\xfe")},
		&pb.ReleaseRequest{Key: "k", KeyBytes: []byte("k"), Token: 3},
		&pb.ListRequest{AfterBytes: []byte{0xff}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b, uint8(0))
	}
	// A key that is not UTF-8 in a string field: no Go client sends it.
	f.Add(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "u8/\xff\xfe"), uint8(0))
	f.Add([]byte{0xff}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		check := func(req *wire.Request) {
			key := wire.ValidateStoredKey
			if req.Op == wire.OpAcquire {
				key = wire.ValidateKey
			}
			if req.Op != wire.OpList && key(req.Key) != nil || wire.ValidateOwner(req.Owner) != nil {
				t.Fatalf("the member was asked %+v", req)
			}
		}
		api := grpcapi.NewWithBackend(&fakeBackend{resp: wire.Response{Op: wire.Op(which)}, check: check}, server.Limits{})
		var err error
		switch which % 5 {
		case 0:
			err = callWith(data, &pb.AcquireRequest{}, api.Acquire)
		case 1:
			err = callWith(data, &pb.ReleaseRequest{}, api.Release)
		case 2:
			err = callWith(data, &pb.RenewRequest{}, api.Renew)
		case 3:
			err = callWith(data, &pb.GetRequest{}, api.Get)
		case 4:
			err = callWith(data, &pb.ListRequest{}, api.List)
		}
		if err != nil && grpcapi.ErrorOf(err) == nil {
			t.Fatalf("an error without its Error detail: %v", err)
		}
	})
}

func (f *fakeBackend) Healthy(context.Context) error { return nil }

// The tag and force fields reach the member's request: a tag field wins
// over the raftlock-tag metadata, which still tags a call without one,
// and a forced release asks for no token and answers the token it ended.
func TestTagAndForceFields(t *testing.T) {
	var got *wire.Request
	f := &fakeBackend{check: func(req *wire.Request) { c := *req; got = &c }}
	api := grpcapi.NewWithBackend(f, server.Limits{})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcapi.TagHeader, "9"))
	f.resp = wire.Response{Op: wire.OpGranted, Token: 3, LeaseMS: 1000}
	if _, err := api.Acquire(ctx, &pb.AcquireRequest{Key: "k", LeaseMs: 1000, Tag: 7}); err != nil || got.Tag != 7 {
		t.Errorf("acquire with the tag field 7 and the metadata 9: tag %d, %v; want 7", got.Tag, err)
	}
	f.resp = wire.Response{Op: wire.OpRenewed}
	if _, err := api.Renew(ctx, &pb.RenewRequest{Key: "k", Token: 3, LeaseMs: 1000}); err != nil || got.Tag != 9 {
		t.Errorf("renew with the metadata 9 alone: tag %d, %v; want 9", got.Tag, err)
	}
	f.resp = wire.Response{Op: wire.OpReleased, Token: 3}
	out, err := api.Release(context.Background(), &pb.ReleaseRequest{Key: "k", Token: 99, Force: true, Tag: 5})
	if err != nil || !got.Force || got.Token != 0 || got.Tag != 5 || out.GetToken() != 3 {
		t.Errorf("forced release: asked %+v, answered %v, %v; want force without a token, tag 5, answering token 3", got, out, err)
	}
}

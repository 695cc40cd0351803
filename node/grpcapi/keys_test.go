package grpcapi_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/raftlock/raftlock/client/wire"
	"github.com/raftlock/raftlock/node/grpcapi"
	"github.com/raftlock/raftlock/node/httpapi"
	"github.com/raftlock/raftlock/node/nodetest"
	"github.com/raftlock/raftlock/node/server"
	pb "github.com/raftlock/raftlock/proto/raftlock/v1"
)

// rawCodec sends a message's bytes as given and reads an answer's so:
// what a client that does not check UTF-8 (or protobuf) may send.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// serveFake serves the API on b over loopback, as a member's API port
// does, and dials it.
func serveFake(t *testing.T, b grpcapi.Backend) *grpc.ClientConn {
	t.Helper()
	return serveFakeWith(t, b, server.Limits{})
}

// serveFakeWith is serveFake with the API's limits lim.
func serveFakeWith(t *testing.T, b grpcapi.Backend, lim server.Limits) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api := grpcapi.NewWithBackend(b, lim)
	srv := httpapi.NewServer(api.Handler(http.NotFoundHandler()), lim, slog.New(slog.DiscardHandler))
	go srv.Serve(ln)
	t.Cleanup(func() { api.Close(); srv.Close() })
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// field appends string field num holding v, whatever its bytes.
func field(b []byte, num protowire.Number, v string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// A message that does not decode, a key that is not UTF-8 among them (no
// Go client sends one, but a client that does not check may), is refused
// INVALID_ARGUMENT with its Error detail, the key with the key rule's
// message, before it reaches the member; so is a key with a NUL. A
// message over 16 KiB is refused by grpc-go itself, RESOURCE_EXHAUSTED
// without a detail, as docs/grpc-api.md's table says.
func TestMessagesThatBreakTheRulesAreRefusedWithTheDetail(t *testing.T) {
	f := &fakeBackend{resp: wire.Response{Op: wire.OpGranted}, check: func(req *wire.Request) {
		t.Errorf("the member was asked %+v", req)
	}}
	conn := serveFake(t, f)
	ctx := nodetest.Context(t, 20*time.Second)
	lease := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 10000)
	for _, tc := range []struct {
		method string
		msg    []byte
		want   string
	}{
		{"Acquire", field(lease, 1, "u8/\xff\xfe"), "key must be valid UTF-8 without NUL"},
		{"Acquire", field(field(lease, 1, "k"), 4, "ci-\xff"), "owner must be valid UTF-8"},
		{"Get", field(nil, 1, "u8/\xff"), "key must be valid UTF-8 without NUL"},
		{"List", field(nil, 1, "u8/\xff"), "prefix must be valid UTF-8"},
		{"Get", []byte{0xff}, "malformed request message: "},
		{"Status", []byte{0x0a}, "malformed request message: "},
	} {
		var out []byte
		err := conn.Invoke(ctx, "/raftlock.v1.Locks/"+tc.method, &tc.msg, &out, grpc.ForceCodecV2(rawCodec{}))
		expectStatus(t, tc.method+" "+tc.want, err, codes.InvalidArgument, "invalid-argument", tc.want)
	}

	// The streams' first messages alike.
	for _, tc := range []struct {
		method string
		desc   grpc.StreamDesc
		msg    []byte
		want   string
	}{
		{"Watch", grpc.StreamDesc{ServerStreams: true}, field(nil, 1, "u8/\xff"), "prefix must be valid UTF-8"},
		{"KeepAlive", grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, field(lease, 1, "u8/\xff\xfe"), "key must be valid UTF-8 without NUL"},
	} {
		s, err := conn.NewStream(ctx, &tc.desc, "/raftlock.v1.Locks/"+tc.method, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(&tc.msg); err != nil {
			t.Fatal(err)
		}
		var out []byte
		expectStatus(t, tc.method+" "+tc.want, s.RecvMsg(&out), codes.InvalidArgument, "invalid-argument", tc.want)
	}

	cl := pb.NewLocksClient(conn)
	_, err := cl.Acquire(ctx, &pb.AcquireRequest{Key: "a\x00b", LeaseMs: 10000})
	expectStatus(t, "a key with a NUL", err, codes.InvalidArgument, "invalid-argument", "key must be valid UTF-8 without NUL")
	_, err = cl.Get(ctx, &pb.GetRequest{Key: "k", KeyBytes: []byte("k")})
	expectStatus(t, "key and key_bytes", err, codes.InvalidArgument, "invalid-argument", "set key or key_bytes, not both")
	_, err = cl.Get(ctx, &pb.GetRequest{Key: strings.Repeat("k", 20000)})
	if status.Code(err) != codes.ResourceExhausted || grpcapi.ErrorOf(err) != nil {
		t.Errorf("a message over the limit: %v, want RESOURCE_EXHAUSTED without a detail (the table's)", err)
	}
}

// A key stored before the key rule, not UTF-8 (planted here below the
// entries, through the node), used to fail every List covering it
// ("string field contains invalid UTF-8") and end every Watch at its next
// event. It is now listed (key as text, key_bytes, next_bytes; the next
// page after_bytes), watched, read and released by key_bytes, and the
// watch goes on past it.
func TestStoredKeyThatIsNotTextIsListedWatchedAndReleased(t *testing.T) {
	g, ctx := startGRPC(t)
	id := g.leader(t, ctx)
	follower := g.Followers(g.Node(id))[0].ID()
	w := watch(t, ctx, g.clients[follower], "u8/")
	cl := g.clients[id]

	// An overlong NUL: never UTF-8, and it sorts before "u8/中".
	const old, text = "u8/\xc0\x80", "u8/\uFFFD\uFFFD"
	tok, err := g.Node(id).AcquireAs(ctx, old, "before-the-rule", 10*time.Minute, 0, 0)
	if err != nil {
		t.Fatalf("planting a key from before the rule: %v", err)
	}
	g.acquire(t, ctx, id, &pb.AcquireRequest{Key: "u8/中", LeaseMs: 600000})

	page, err := cl.List(ctx, &pb.ListRequest{Prefix: "u8/", Limit: 1})
	if err != nil {
		t.Fatalf("a list over the old key: %v", err)
	}
	if len(page.Locks) != 1 || page.Locks[0].Key != text || string(page.Locks[0].KeyBytes) != old || page.Locks[0].Token != tok ||
		!page.More || page.Next != text || string(page.NextBytes) != old {
		t.Fatalf("the page with the old key: %v", page)
	}
	page, err = cl.List(ctx, &pb.ListRequest{Prefix: "u8/", AfterBytes: page.NextBytes})
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "u8/中" || page.Locks[0].KeyBytes != nil || page.More {
		t.Fatalf("the page after the old key: %v, %v", page, err)
	}
	if _, err := cl.List(ctx, &pb.ListRequest{}); err != nil {
		t.Fatalf("a list of every key: %v", err)
	}
	got, err := cl.Get(ctx, &pb.GetRequest{KeyBytes: []byte(old)})
	if err != nil || !got.Held || got.Token != tok || got.Key != text || string(got.KeyBytes) != old || got.Owner != "before-the-rule" {
		t.Fatalf("get by key_bytes: %v, %v", got, err)
	}
	rel, err := cl.Release(ctx, &pb.ReleaseRequest{KeyBytes: []byte(old), Token: tok})
	if err != nil || rel.Key != text || string(rel.KeyBytes) != old {
		t.Fatalf("release by key_bytes: %v, %v", rel, err)
	}
	if got, err := cl.Get(ctx, &pb.GetRequest{KeyBytes: []byte(old)}); err != nil || got.Held {
		t.Fatalf("get after the release: %v, %v", got, err)
	}
	if _, err := cl.Acquire(ctx, &pb.AcquireRequest{Key: "u8/after", LeaseMs: 600000}); err != nil {
		t.Fatal(err)
	}

	evs := events(t, w, 4)
	for i, want := range []struct {
		key string
		typ pb.EventType
	}{{old, pb.EventType_EVENT_TYPE_GRANTED}, {"u8/中", pb.EventType_EVENT_TYPE_GRANTED}, {old, pb.EventType_EVENT_TYPE_RELEASED}, {"u8/after", pb.EventType_EVENT_TYPE_GRANTED}} {
		key := evs[i].Key
		if evs[i].KeyBytes != nil {
			key = string(evs[i].KeyBytes)
		}
		if key != want.key || evs[i].Type != want.typ || (want.key == old) != bytes.Equal(evs[i].KeyBytes, []byte(old)) {
			t.Errorf("event %d: %v, want %s of %q", i, evs[i], want.typ, want.key)
		}
	}
}

package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

func roundTripFrame(t *testing.T, frame []byte) []byte {
	t.Helper()
	body, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame)))
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	return body
}

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{ID: 1, Op: OpAcquire, Key: "k", LeaseMS: 1000, WaitMS: 30000, Tag: 7},
		{ID: 1 << 60, Op: OpRelease, Key: "key/with/slashes", Token: 99},
		{ID: 3, Op: OpRenew, Key: "k", Token: 5, LeaseMS: 10},
		{ID: 7, Op: OpRelease, Key: "k", Token: 99, Tag: 12},
		{ID: 8, Op: OpRenew, Key: "k", Token: 5, LeaseMS: 10, Tag: 13},
		{ID: 4, Op: OpGet, Key: "k", Stale: true},
		{ID: 5, Op: OpStatus},
		{ID: 6, Op: OpCancel},
		{ID: 9, Op: OpAdmin, Key: "member.add", Body: []byte(`{"id":4}`)},
		{ID: 10, Op: OpAdmin, Key: "member.list"},
		{ID: 11, Op: OpAcquire, Key: "k", LeaseMS: 1000, Tag: 7, Owner: "web-1:4242"},
		{ID: 12, Op: OpRelease, Key: "k", Tag: 3, Force: true},
		{ID: 13, Op: OpList, Prefix: "jobs/", After: "jobs/a", Limit: 100, Stale: true},
		{ID: 14, Op: OpList},
		{ID: 15, Op: OpWatch, Prefix: "jobs/"},
	} {
		got, err := DecodeRequest(roundTripFrame(t, AppendRequest(nil, &r)))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
}

// A release or renew from a client that sends no tag still decodes.
func TestUntaggedReleaseAndRenewDecode(t *testing.T) {
	for _, r := range []Request{
		{ID: 1, Op: OpRelease, Key: "k", Token: 99},
		{ID: 2, Op: OpRenew, Key: "k", Token: 5, LeaseMS: 10},
	} {
		frame := AppendRequest(nil, &r)
		frame = frame[:len(frame)-1] // drop the trailing zero tag
		frame[3]--                   // and shorten the length prefix
		got, err := DecodeRequest(roundTripFrame(t, frame))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("untagged %+v: %+v, %v", r, got, err)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, r := range []Response{
		{ID: 1, Op: OpGranted, Token: 17, LeaseMS: 1000},
		{ID: 2, Op: OpHeld}, {ID: 3, Op: OpReleased}, {ID: 4, Op: OpRenewed}, {ID: 5, Op: OpNotFound},
		{ID: 6, Op: OpValue, Held: true, Token: 3, RemainingMS: 900},
		{ID: 7, Op: OpRedirect, LeaderID: 2, Leader: "127.0.0.1:8002"},
		{ID: 8, Op: OpUnavailable, Reason: "no leader"},
		{ID: 9, Op: OpInvalidArgument, Reason: "key must be 1..256 bytes"},
		{ID: 10, Op: OpOutcomeUnknown, Reason: "leadership lost"},
		{ID: 11, Op: OpError, Reason: "grant rejected"},
		{ID: 13, Op: OpOverloaded, Reason: "too many waiters"},
		{ID: 12, Op: OpStatusInfo, Status: Status{ID: 1, Addr: "a", Role: "leader", Term: 2, Leader: 1, Commit: 9, Applied: 9, Locks: 1, LastToken: 4, Digest: "ab"}},
		{ID: 14, Op: OpStatusInfo, Status: Status{ID: 1, Role: "leader", Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}},
		{ID: 15, Op: OpAdminResult, Body: []byte(`{"members":[]}`)},
		{ID: 16, Op: OpWatching, From: 42},
		{ID: 16, Op: OpEvent, Event: Event{Key: "jobs/a", Type: EventGranted, Token: 3, Owner: "ci", LeaseMS: 30000, Index: 43}},
		{ID: 16, Op: OpReleased, Token: 9},
		{ID: 17, Op: OpValue, Held: true, Token: 3, RemainingMS: 900, Owner: "web-1:4242"},
		{ID: 18, Op: OpLocks, Locks: []Lock{{Key: "a", Token: 1, Owner: "o", RemainingMS: 5}, {Key: "b", Token: 2}}, More: true},
		{ID: 19, Op: OpLocks},
	} {
		got, err := DecodeResponse(roundTripFrame(t, AppendResponse(nil, &r)))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
}

func TestBadFrames(t *testing.T) {
	good := AppendRequest(nil, &Request{ID: 1, Op: OpAcquire, Key: "k", LeaseMS: 10})
	frames := map[string][]byte{
		"oversized": {0x7f, 0, 0, 0},
		"truncated": good[:len(good)-1],
		"short":     {0, 0, 0, 2, 1, 2},
	}
	for name, f := range frames {
		if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(f))); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	bodies := map[string][]byte{
		"unknown op": append([]byte{0x7e}, make([]byte, 8)...),
		"trailing":   append(append([]byte{}, good[4:]...), 0, 0), // an empty owner, then one byte too many
		"cut field":  good[4 : len(good)-1],
		"bad bool":   append(AppendRequest(nil, &Request{Op: OpGet, Key: "k"})[4:len(AppendRequest(nil, &Request{Op: OpGet, Key: "k"}))-1], 2),
	}
	for name, b := range bodies {
		if _, err := DecodeRequest(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// checkReencodes: a body that decodes encodes again (less its
// 4-byte length) into a body that decodes to the same value.
func checkReencodes[T any](t *testing.T, body []byte, decode func([]byte) (T, error), encode func([]byte, *T) []byte) {
	t.Helper()
	r, err := decode(body)
	if err != nil {
		return
	}
	again, err := decode(encode(nil, &r)[4:])
	if err != nil || !reflect.DeepEqual(again, r) {
		t.Fatalf("re-encoding changed %+v into %+v (%v)", r, again, err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(AppendRequest(nil, &Request{ID: 1, Op: OpAcquire, Key: "k", LeaseMS: 10, WaitMS: 5, Tag: 1})[4:])
	f.Add(AppendRequest(nil, &Request{ID: 2, Op: OpGet, Key: "k", Stale: true})[4:])
	f.Add(AppendRequest(nil, &Request{ID: 3, Op: OpAdmin, Key: "member.add", Body: []byte("{}")})[4:])
	f.Add(AppendRequest(nil, &Request{ID: 4, Op: OpAcquire, Key: "k", LeaseMS: 10, Owner: "o"})[4:])
	f.Add(AppendRequest(nil, &Request{ID: 5, Op: OpRelease, Key: "k", Force: true})[4:])
	f.Add(AppendRequest(nil, &Request{ID: 6, Op: OpList, Prefix: "p", After: "p/a", Limit: 3})[4:])
	f.Add(AppendRequest(nil, &Request{ID: 7, Op: OpWatch, Prefix: "jobs/"})[4:])
	f.Add(AppendRequest(nil, &Request{ID: 8, Op: OpAcquire, Key: "k", LeaseMS: 10, Owner: "o", Forwarded: true, Behalf: "alice"})[4:])
	f.Add(AppendRequest(nil, &Request{ID: 9, Op: OpRelease, Key: "k", Force: true, Forwarded: true})[4:])
	f.Fuzz(func(t *testing.T, body []byte) { checkReencodes(t, body, DecodeRequest, AppendRequest) })
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(AppendResponse(nil, &Response{ID: 1, Op: OpGranted, Token: 1, LeaseMS: 10})[4:])
	f.Add(AppendResponse(nil, &Response{ID: 1, Op: OpStatusInfo, Status: Status{Role: "leader"}})[4:])
	f.Add(AppendResponse(nil, &Response{ID: 1, Op: OpStatusInfo, Status: Status{Voters: []uint64{1}, Learners: []uint64{2}}})[4:])
	f.Add(AppendResponse(nil, &Response{ID: 1, Op: OpAdminResult, Body: []byte("{}")})[4:])
	f.Add(AppendResponse(nil, &Response{ID: 1, Op: OpLocks, Locks: []Lock{{Key: "a", Token: 1, Owner: "o"}}, More: true})[4:])
	f.Add(AppendResponse(nil, &Response{ID: 1, Op: OpValue, Held: true, Token: 1, Owner: "o"})[4:])
	f.Add(AppendResponse(nil, &Response{ID: 1, Op: OpWatching, From: 7})[4:])
	f.Add(AppendResponse(nil, &Response{ID: 1, Op: OpEvent, Event: Event{Key: "k", Type: EventExpired, Token: 3, Owner: "o", LeaseMS: 10, Index: 9}})[4:])
	f.Fuzz(func(t *testing.T, body []byte) { checkReencodes(t, body, DecodeResponse, AppendResponse) })
}

// Frames written from many goroutines, in bursts, through a slow
// connection arrive whole, none lost and none torn (run with -race: a buffer
// shared between the flusher and the writers shows up as a race).
func TestWriterCombinesConcurrentFrames(t *testing.T) {
	buf := &safeBuffer{delay: 50 * time.Microsecond}
	w := NewWriter(buf, nil)
	const writers, each = 50, 40
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := uint64(g*each + i)
				w.Write(func(b []byte) []byte { return AppendRequest(b, &Request{ID: id, Op: OpGet, Key: "key"}) })
				if i%7 == 0 {
					time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	frame := len(AppendRequest(nil, &Request{Op: OpGet, Key: "key"}))
	deadline := time.Now().Add(5 * time.Second)
	for buf.Len() < writers*each*frame && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	w.Close()
	r := bufio.NewReader(bytes.NewReader(buf.Bytes()))
	seen := map[uint64]bool{}
	for {
		body, err := ReadFrame(r)
		if err != nil {
			break
		}
		req, err := DecodeRequest(body)
		if err != nil || req.Key != "key" {
			t.Fatalf("torn frame: %+v %v", req, err)
		}
		seen[req.ID] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d of %d frames arrived", len(seen), writers*each)
	}
}

type safeBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	delay time.Duration
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *safeBuffer) Bytes() []byte { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Bytes() }

func (s *safeBuffer) Len() int { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Len() }

// gateWriter blocks each Write until released, then keeps what it was given.
type gateWriter struct {
	started chan struct{}
	release chan struct{}
	mu      sync.Mutex
	got     []byte
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.started <- struct{}{}
	<-g.release
	g.mu.Lock()
	g.got = append(g.got, p...)
	g.mu.Unlock()
	return len(p), nil
}

// A wake-up that finds nothing to write must not leave the buffer being
// appended to sharing memory with the buffer being written.
func TestWriterEmptyWakeupKeepsBuffersApart(t *testing.T) {
	g := &gateWriter{started: make(chan struct{}), release: make(chan struct{})}
	w := NewWriter(g, nil)
	defer w.Close()
	frame := func(id uint64) func([]byte) []byte {
		return func(b []byte) []byte { return AppendRequest(b, &Request{ID: id, Op: OpGet, Key: "k"}) }
	}
	w.Write(frame(1))
	<-g.started // writing frame 1
	w.Write(frame(2))
	g.release <- struct{}{}
	<-g.started          // writing frame 2
	w.kick <- struct{}{} // a late wake-up with nothing behind it
	g.release <- struct{}{}
	for len(w.kick) > 0 { // wait until the flusher has taken it
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond)
	w.Write(frame(3))
	<-g.started       // writing frame 3
	w.Write(frame(4)) // appended while frame 3 is in flight
	g.release <- struct{}{}
	<-g.started
	g.release <- struct{}{}
	deadline := time.Now().Add(2 * time.Second)
	for {
		g.mu.Lock()
		n := len(g.got)
		g.mu.Unlock()
		if n >= 4*len(frame(0)(nil)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := bufio.NewReader(bytes.NewReader(g.got))
	for want := uint64(1); want <= 4; want++ {
		body, err := ReadFrame(r)
		if err != nil {
			t.Fatalf("frame %d: %v", want, err)
		}
		if req, err := DecodeRequest(body); err != nil || req.ID != want {
			t.Fatalf("frame %d arrived as %+v (%v)", want, req, err)
		}
	}
}

// A forwarded request travels in an OpForward envelope and decodes to
// itself, under the envelope's id; what cannot be forwarded (another
// envelope, a cancel, a watch, an announcement) is malformed.
func TestForwardedRequests(t *testing.T) {
	for _, r := range []Request{
		{ID: 11, Op: OpAcquire, Key: "k", LeaseMS: 10, WaitMS: 5, Tag: 3, Owner: "o", Forwarded: true, Behalf: "alice"},
		{ID: 12, Op: OpRelease, Key: "k", Token: 4, Force: true, Forwarded: true},
		{ID: 13, Op: OpList, Prefix: "a/", After: "a/b", Limit: 7, Forwarded: true, Behalf: "bob"},
		{ID: 14, Op: OpAdmin, Key: "member.list", Body: []byte("{}"), Forwarded: true, Behalf: "admin"},
	} {
		frame := AppendRequest(nil, &r)
		if Op(frame[4]) != OpForward {
			t.Fatalf("%+v: sent as op 0x%02x, want OpForward", r, frame[4])
		}
		got, err := DecodeRequest(frame[4:])
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("decoded %+v (%v), want %+v", got, err, r)
		}
	}
	envelope := func(id uint64, behalf string, inner []byte) []byte {
		b := binary.BigEndian.AppendUint64([]byte{byte(OpForward)}, id)
		return appendBytes(appendString(b, behalf), inner)
	}
	for name, inner := range map[string][]byte{
		"nested":       AppendRequest(nil, &Request{ID: 1, Op: OpGet, Key: "k", Forwarded: true})[4:],
		"cancel":       AppendRequest(nil, &Request{ID: 1, Op: OpCancel})[4:],
		"watch":        AppendRequest(nil, &Request{ID: 1, Op: OpWatch, Prefix: "a"})[4:],
		"announcement": AppendRequest(nil, &Request{ID: 1, Op: OpStatus, Features: FeatureWatch})[4:],
		"garbage":      {0x01, 0x02},
	} {
		if _, err := DecodeRequest(envelope(5, "x", inner)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s inside OpForward: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := DecodeRequest(append(envelope(5, "x", AppendRequest(nil, &Request{ID: 1, Op: OpGet, Key: "k"})[4:]), 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("trailing byte after OpForward: %v, want ErrMalformed", err)
	}
}

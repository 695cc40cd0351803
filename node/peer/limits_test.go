package peer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

type nopHandler struct{}

func (nopHandler) Receive(*raftpb.Message)     {}
func (nopHandler) ReportUnreachable(uint64)    {}
func (nopHandler) ReportSnapshot(uint64, bool) {}

func frameHeader(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func TestReadFrameRefusesOversizedLengthBeforeReading(t *testing.T) {
	r := bufio.NewReader(bytes.NewReader(frameHeader(DefaultFrameLimit + 1)))
	if _, err := readFrame(r, DefaultFrameLimit); err == nil || !strings.Contains(err.Error(), "exceeds limit") {
		t.Fatalf("got %v, want a frame-too-large error", err)
	}
}

// A length that lies (64 MiB announced, 10 bytes sent) must not cost the
// member 64 MiB.
func TestReadFrameLyingLengthAllocatesLittle(t *testing.T) {
	in := append(frameHeader(DefaultFrameLimit), make([]byte, 10)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := readFrame(bufio.NewReader(bytes.NewReader(in)), DefaultFrameLimit)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a truncated frame was accepted")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16*frameChunk { // 4 MiB: room for other goroutines, far below 64 MiB
		t.Fatalf("allocated %d bytes for a frame that sent 10", got)
	}
}

func TestReadFrameWholeFrames(t *testing.T) {
	for _, n := range []int{0, 1, frameChunk - 1, frameChunk, 3*frameChunk + 7} {
		payload := bytes.Repeat([]byte{0xab}, n)
		got, err := readFrame(bufio.NewReader(bytes.NewReader(AppendFrame(nil, payload))), DefaultFrameLimit)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("frame of %d bytes: got %d bytes, err %v", n, len(got), err)
		}
	}
}

func startTCP(t *testing.T, timeout time.Duration) *TCP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	peers := map[uint64]string{1: addr, 2: "127.0.0.1:1", 3: "127.0.0.1:1"}
	return startTransport(t, Config{ID: 1, Peers: peers, HelloTimeout: timeout}, nopHandler{}, withReadTimeout(timeout))
}

// closedWithin says whether the member closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	return !idle(err)
}

func TestSilentPeerStreamIsClosed(t *testing.T) {
	tr := startTCP(t, 100*time.Millisecond)
	for _, what := range []string{"before its hello", "mid-frame"} {
		c, err := net.Dial("tcp", tr.listenAddr)
		if err != nil {
			t.Fatal(err)
		}
		if what == "mid-frame" {
			c.Write(frameHeader(100)) // then silence
		}
		if !closedWithin(c, 3*time.Second) {
			t.Fatalf("a stream silent %s was not closed", what)
		}
		c.Close()
	}
}

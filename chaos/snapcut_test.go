package chaos

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// writeSnapshotStream writes a snapshot stream as node/peer writes one:
// the hello, the marker, a header announcing chunks*chunk bytes, then the
// chunks. It stops at the first write error (the proxy cut it).
func writeSnapshotStream(c net.Conn, chunks, chunk int) {
	frame := func(p []byte) error {
		_, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...))
		return err
	}
	frame([]byte("hello"))
	frame([]byte(snapshotStreamMarker))
	hdr := binary.AppendUvarint([]byte(snapshotHeaderMagic), uint64(chunks*chunk))
	frame(append(hdr, make([]byte, 40)...)) // the SHA-256 and a message: not read
	data := make([]byte, chunk)
	for i := range chunks {
		if frame(append(binary.AppendUvarint(nil, uint64(i)), data...)) != nil {
			return
		}
	}
}

// An armed cut stops the next snapshot stream once its share of the data
// went through, at least one chunk and before the last: the receiver gets
// the chunks before the cut point whole, then the end of the stream. The
// next stream, unarmed, goes through whole.
func TestProxyCutsASnapshotStreamMidTransfer(t *testing.T) {
	const chunks, chunk = 40, 1000
	sink := newFrameSink(t)
	p, c := startProxy(t, sink.addr)
	done := make(chan SnapshotCut, 1)
	p.CutSnapshot(3, 1, 0.5, done)
	go writeSnapshotStream(c, chunks, chunk)
	var cut SnapshotCut
	select {
	case cut = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the armed cut never reported")
	}
	if !cut.Cut || cut.From != 3 || cut.To != 1 || cut.Size != chunks*chunk || cut.Forwarded != chunks*chunk/2 {
		t.Fatalf("cut %+v, want the link 3->1 cut after %d of %d bytes", cut, chunks*chunk/2, chunks*chunk)
	}
	for range 3 { // hello, marker, header
		sink.next(t)
	}
	for i := range chunks / 2 {
		if a := sink.next(t); len(a.payload) != chunk+1 || a.payload[0] != byte(i) {
			t.Fatalf("chunk %d arrived as %d bytes starting %d", i, len(a.payload), a.payload[0])
		}
	}
	select {
	case a := <-sink.frames:
		t.Fatalf("a frame of %d bytes arrived past the cut", len(a.payload))
	case <-time.After(100 * time.Millisecond):
	}

	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	writeSnapshotStream(c2, chunks, chunk)
	for range 3 + chunks {
		sink.next(t)
	}
	select {
	case cut := <-done:
		t.Fatalf("an unarmed stream reported %+v", cut)
	default:
	}
}

// A snapshot of one chunk cannot be cut before its end: the cut reports
// that the stream ended first.
func TestProxyCutOfASingleChunkSnapshotReportsNoCut(t *testing.T) {
	sink := newFrameSink(t)
	p, c := startProxy(t, sink.addr)
	done := make(chan SnapshotCut, 1)
	p.CutSnapshot(2, 1, 0.9, done)
	writeSnapshotStream(c, 1, 500)
	for range 4 {
		sink.next(t)
	}
	c.Close()
	select {
	case cut := <-done:
		if cut.Cut || cut.Forwarded != 500 {
			t.Fatalf("cut %+v, want no cut after the whole 500 bytes", cut)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the armed cut never reported")
	}
}

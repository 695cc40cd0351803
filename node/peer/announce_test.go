package peer

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/freeport"
)

// Each member learns the API address of the members its streams reach,
// from the receivers' announcements; a member that serves no API (or,
// alike, one from before the announcement) announces nothing and its
// address stays unknown; a stream that ends forgets what it announced.
func TestAPIAddressAnnouncedOnTheStream(t *testing.T) {
	a := freeport.ForIDs(t, 1, 2, 3)
	peers := map[uint64]string{1: a[1], 2: a[2], 3: a[3]}
	const cluster = 0xa9
	m1, _ := startMember(t, 1, peers, cluster, func(c *Config) { c.APIAddr = "api-of-1" })
	m2, _ := startMember(t, 2, peers, cluster, func(c *Config) { c.APIAddr = "api-of-2" })
	m3, rec3 := startMember(t, 3, peers, cluster) // no API

	if got := m1.PeerAPIAddr(1); got != "api-of-1" {
		t.Errorf("member 1's own API address is %q", got)
	}
	eventually(t, "member 1 to learn member 2's API address", func() { m1.Send(heartbeatMsg(1, 2)) },
		func() bool { return m1.PeerAPIAddr(2) == "api-of-2" })
	eventually(t, "member 2 to learn member 1's API address", func() { m2.Send(heartbeatMsg(2, 1)) },
		func() bool { return m2.PeerAPIAddr(1) == "api-of-1" })
	eventually(t, "member 3 to take member 1's heartbeat", func() { m1.Send(heartbeatMsg(1, 3)) },
		func() bool { return rec3.from(1) > 0 })
	if got := m1.PeerAPIAddr(3); got != "" {
		t.Errorf("member 3 serves no API, yet member 1 knows it at %q", got)
	}
	if got := m3.PeerAPIAddr(3); got != "" {
		t.Errorf("member 3 serves no API, yet says it does at %q", got)
	}

	m2.Close()
	eventually(t, "member 1 to forget the API address of stopped member 2", func() { m1.Send(heartbeatMsg(1, 2)) },
		func() bool { return m1.PeerAPIAddr(2) == "" })
}

// A sender from before the announcement reads what comes back only to
// compare its first bytes with the removed notice, then discards it: an
// announcement must never be taken for that notice. And the notice after
// an announcement (or without one) is still reported.
func TestAnnouncementIsNeverTheRemovedNotice(t *testing.T) {
	ann := appendAPIAnnouncement(nil, strings.Repeat("h", 64)+":1")
	if bytes.HasPrefix([]byte(removedNotice), ann[:len(apiMagic)]) || bytes.HasPrefix(ann, []byte(removedNotice)) {
		t.Fatal("an announcement reads as the removed notice")
	}
	for _, back := range [][]byte{[]byte(removedNotice), append(ann, removedNotice...)} {
		rec := &removalRecorder{}
		tr := &TCP{handler: rec, apiAddrs: map[uint64]string{}}
		p := &peerSender{t: tr, id: 4}
		client, server := net.Pipe()
		go func() { server.Write(back); server.Close() }()
		p.readBack(client)
		if got := rec.removedBy(); len(got) != 1 || got[0] != 4 {
			t.Errorf("after %q: removal reported by %v, want member 4", back, got)
		}
		if got := tr.PeerAPIAddr(4); got != "" {
			t.Errorf("the ended stream's announcement is still known: %q", got)
		}
	}
}

// What the receiver of a stream writes back is read without a panic,
// whatever it is, and an announcement read back is what was written.
func FuzzReadAPIAnnouncement(f *testing.F) {
	f.Add(appendAPIAnnouncement(nil, "127.0.0.1:10001"))
	f.Add(appendAPIAnnouncement(nil, ""))
	f.Add([]byte(apiMagic + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Add([]byte(removedNotice))
	f.Fuzz(func(t *testing.T, b []byte) {
		addr, err := readAPIAnnouncement(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		if len(addr) > maxAPIAddr {
			t.Fatalf("an address of %d bytes was taken", len(addr))
		}
		again, err := readAPIAnnouncement(bufio.NewReader(bytes.NewReader(appendAPIAnnouncement(nil, addr))))
		if err != nil || again != addr {
			t.Fatalf("read %q from %q, but its encoding reads as %q, %v", addr, b, again, err)
		}
	})
}

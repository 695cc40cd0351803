package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The HTTP/JSON API address travels the other way from the client
// address. A hello cannot carry it: a member from before it refuses a
// hello with anything after the peer address (decodeHelloExtension), so a
// new field there would cut old and new members apart during a rolling
// upgrade. But nothing has ever been written back on a regular stream
// except the removed notice, and a sender from before reads what comes
// back only to compare it with that notice, discarding the rest. So the
// receiver of a regular stream announces its API address on it, once,
// after the stream's first raft message (by then it knows the stream is
// not a snapshot stream, whose replies an old sender decodes strictly):
//
//	"RLPA", the address's length (uvarint), the address
//
// The sender keeps what it read while the stream lasts. A peer whose
// stream announced nothing (a member from before, or one serving no API)
// has no API address here: unknown, which the API answers as unavailable.
const apiMagic = "RLPA"

// maxAPIAddr bounds an announced API address (a host name and port).
const maxAPIAddr = 1024

// appendAPIAnnouncement appends the announcement of addr to b.
func appendAPIAnnouncement(b []byte, addr string) []byte {
	b = append(b, apiMagic...)
	b = binary.AppendUvarint(b, uint64(len(addr)))
	return append(b, addr...)
}

// readAPIAnnouncement reads one announcement from r, which starts with
// apiMagic.
func readAPIAnnouncement(r *bufio.Reader) (string, error) {
	var magic [len(apiMagic)]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return "", err
	}
	if string(magic[:]) != apiMagic {
		return "", errors.New("not an API address announcement")
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return "", fmt.Errorf("API address announcement: %w", err)
	}
	if n > maxAPIAddr {
		return "", fmt.Errorf("API address announcement of %d bytes exceeds %d", n, maxAPIAddr)
	}
	addr := make([]byte, n)
	if _, err := io.ReadFull(r, addr); err != nil {
		return "", fmt.Errorf("API address announcement: %w", err)
	}
	return string(addr), nil
}

// announceAPI writes this member's API address on accepted stream c, if
// it serves one. A failed write is the stream's business: its reads end.
func (t *TCP) announceAPI(c net.Conn) {
	if t.apiAddr == "" {
		return
	}
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(appendAPIAnnouncement(nil, t.apiAddr))
	c.SetWriteDeadline(time.Time{})
}

// readBack reads what the receiver of this sender's stream c writes back
// until c ends: the removed notice (reported), API address announcements
// (kept until c ends), and nothing else (the rest is discarded).
func (p *peerSender) readBack(c net.Conn) {
	r := bufio.NewReader(c)
	defer p.t.setPeerAPIAddr(p.id, "")
	for {
		head, err := r.Peek(len(apiMagic))
		if err != nil {
			return
		}
		if string(head) != apiMagic {
			break
		}
		addr, err := readAPIAnnouncement(r)
		if err != nil {
			break
		}
		p.t.setPeerAPIAddr(p.id, addr)
	}
	buf := make([]byte, len(removedNotice))
	if n, _ := io.ReadFull(r, buf); n == len(buf) && string(buf) == removedNotice {
		if rh, ok := p.t.handler.(RemovedHandler); ok {
			rh.ReportRemoved(p.id)
		}
	}
	io.Copy(io.Discard, r)
}

// setPeerAPIAddr records (or, with "", forgets) the API address peer id
// announced.
func (t *TCP) setPeerAPIAddr(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if addr == "" {
		delete(t.apiAddrs, id)
		return
	}
	t.apiAddrs[id] = addr
}

// PeerAPIAddr implements Transport: this member's own API address, or the
// one peer id announced on this member's stream to it, "" when unknown.
func (t *TCP) PeerAPIAddr(id uint64) string {
	if id == t.id {
		return t.apiAddr
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.apiAddrs[id]
}
